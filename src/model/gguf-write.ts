/**
 * GGUF v3 writer: metadata, tensor table, then each tensor's bytes at an aligned offset. Used to make test models
 * (and by tests that craft bad files on purpose).
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { assert } from '../util/assert.js';
import {
  elementCount,
  GGML_TYPE_CODES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VALUE_CODES,
  type GgufMetadata,
  type GgufNumberType,
  type GgufScalarType,
  type GgufTensor,
  type GgufValue,
  metaNumber,
  tensorByteSize,
} from './gguf-types.js';

/** Appends little-endian values to a growing list of chunks. */
class ByteSink {
  readonly chunks: Buffer[] = [];
  length = 0;

  push(buffer: Buffer): void {
    this.chunks.push(buffer);
    this.length += buffer.length;
  }

  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }

  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }

  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.push(bytes);
  }

  number(type: GgufNumberType, v: number): void {
    const sizes = { u8: 1, i8: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, u64: 8, i64: 8, f64: 8 } as const;
    const b = Buffer.alloc(sizes[type]);
    switch (type) {
      case 'u8':
        b.writeUInt8(v);
        break;
      case 'i8':
        b.writeInt8(v);
        break;
      case 'u16':
        b.writeUInt16LE(v);
        break;
      case 'i16':
        b.writeInt16LE(v);
        break;
      case 'u32':
        b.writeUInt32LE(v);
        break;
      case 'i32':
        b.writeInt32LE(v);
        break;
      case 'f32':
        b.writeFloatLE(v);
        break;
      case 'u64':
        b.writeBigUInt64LE(BigInt(v));
        break;
      case 'i64':
        b.writeBigInt64LE(BigInt(v));
        break;
      case 'f64':
        b.writeDoubleLE(v);
        break;
    }
    this.push(b);
  }

  scalar(type: GgufScalarType, v: string | number | boolean): void {
    if (type === 'string') this.string(v as string);
    else if (type === 'bool') this.push(Buffer.from([v ? 1 : 0]));
    else this.number(type, v as number);
  }

  value(value: GgufValue): void {
    this.u32(GGUF_VALUE_CODES[value.type]);
    if (value.type !== 'array') {
      this.scalar(value.type, value.value);
      return;
    }
    this.u32(GGUF_VALUE_CODES[value.itemType]);
    this.u64(value.value.length);
    for (const item of value.value) this.scalar(value.itemType, item);
  }
}

export interface GgufWriteOptions {
  /** for tests of the reader's error paths: write this version number */
  version?: number;
}

export function writeGguf(
  path: string,
  metadata: GgufMetadata,
  tensors: readonly GgufTensor[],
  options: GgufWriteOptions = {},
): void {
  const alignment = metaNumber(metadata, 'general.alignment') ?? GGUF_DEFAULT_ALIGNMENT;
  const head = new ByteSink();
  head.u32(GGUF_MAGIC);
  head.u32(options.version ?? 3);
  head.u64(tensors.length);
  head.u64(metadata.size);
  for (const [key, value] of metadata) {
    head.string(key);
    head.value(value);
  }
  let offset = 0;
  for (const t of tensors) {
    const byteSize = tensorByteSize(t.dtype, elementCount(t.dims));
    assert(t.data.byteLength === byteSize, `tensor ${t.name}: ${t.data.byteLength} bytes, expected ${byteSize}`);
    head.string(t.name);
    head.u32(t.dims.length);
    for (const d of t.dims) head.u64(d);
    head.u32(GGML_TYPE_CODES[t.dtype]);
    head.u64(offset);
    offset = Math.ceil((offset + byteSize) / alignment) * alignment;
  }
  const padTo = (length: number) => Buffer.alloc(Math.ceil(length / alignment) * alignment - length);
  head.push(padTo(head.length));

  const fd = openSync(path, 'w');
  try {
    writeSync(fd, Buffer.concat(head.chunks)); // one write: a large vocabulary is many small pieces
    for (const t of tensors) {
      const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      writeSync(fd, bytes);
      writeSync(fd, padTo(bytes.length));
    }
  } finally {
    closeSync(fd);
  }
}
