/**
 * GGUF reader (versions 2 and 3). Reads the header through a small window over the file descriptor, then each tensor's
 * bytes straight into its place in one weight arena (a typed array per tensor over a single buffer), so the file is
 * never held twice in memory. Every count, length and offset from the file is checked against LIMITS and the file
 * size before use, and tensors may not overlap: a bad file gives one KvfenceError line.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import {
  blockSize,
  elementCount,
  GGML_TYPE_CODES,
  GGML_UNSUPPORTED_TYPE_NAMES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VALUE_CODES,
  type GgufMetadata,
  type GgufNumberType,
  type GgufScalarType,
  type GgufTensor,
  type GgufValue,
  isQuantized,
  metaNumber,
  QUANT_BLOCKS,
  tensorByteSize,
  type WeightDType,
} from './gguf-types.js';
import { widenedBytes, widenQ5_0 } from './widen-q5-0.js';

export interface GgufTensorInfo {
  name: string;
  dtype: WeightDType;
  dims: number[];
  /** absolute byte offset in the file */
  fileOffset: number;
  byteSize: number;
}

export interface GgufHeader {
  path: string;
  version: number;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  dataOffset: number;
  fileSize: number;
}

const VALUE_TYPES_BY_CODE = new Map<number, GgufScalarType | 'array'>(
  Object.entries(GGUF_VALUE_CODES).map(([name, code]) => [code, name as GgufScalarType | 'array']),
);
const DTYPES_BY_CODE = new Map<number, WeightDType>(
  Object.entries(GGML_TYPE_CODES).map(([name, code]) => [code, name as WeightDType]),
);
const SUPPORTED_TYPES = Object.keys(GGML_TYPE_CODES).join(', ');
const WINDOW_BYTES = 1 << 20;
/** node's readSync refuses a length of 2 GiB or more: a larger tensor is read in pieces of this */
const READ_BYTES_MAX = 1 << 30;

function bad(path: string, what: string): KvfenceError {
  return new KvfenceError('invalid_model_file', `${path}: not a valid GGUF file: ${what}`);
}

/** A forward-only cursor over a file with a refillable window; every read is bounds-checked against the file size. */
class FileCursor {
  private window = Buffer.alloc(0);
  private windowStart = 0;
  position = 0;

  constructor(
    private readonly fd: number,
    readonly fileSize: number,
    private readonly path: string,
  ) {}

  private ensure(byteCount: number, what: string): number {
    if (this.position + byteCount > this.fileSize) throw bad(this.path, `truncated while reading ${what}`);
    const windowEnd = this.windowStart + this.window.length;
    if (this.position < this.windowStart || this.position + byteCount > windowEnd) {
      const length = Math.min(Math.max(byteCount, WINDOW_BYTES), this.fileSize - this.position);
      this.window = Buffer.alloc(length);
      const got = readSync(this.fd, this.window, 0, length, this.position);
      if (got !== length) throw bad(this.path, `short read while reading ${what}`);
      this.windowStart = this.position;
    }
    const at = this.position - this.windowStart;
    this.position += byteCount;
    return at;
  }

  /** Reads `byteCount` bytes at the cursor with `read` (the window may be replaced first, so it is passed in). */
  private read<T>(byteCount: number, what: string, read: (window: Buffer, at: number) => T): T {
    const at = this.ensure(byteCount, what);
    return read(this.window, at);
  }

  u32(what: string): number {
    return this.read(4, what, (b, at) => b.readUInt32LE(at));
  }

  /** u64 as a number; values above 2^53 cannot be a valid size or count here. */
  u64(what: string): number {
    const v = this.read(8, what, (b, at) => b.readBigUInt64LE(at));
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw bad(this.path, `${what} is too large (${v})`);
    return Number(v);
  }

  number(type: GgufNumberType, what: string): number {
    switch (type) {
      case 'u8':
        return this.read(1, what, (b, at) => b.readUInt8(at));
      case 'i8':
        return this.read(1, what, (b, at) => b.readInt8(at));
      case 'u16':
        return this.read(2, what, (b, at) => b.readUInt16LE(at));
      case 'i16':
        return this.read(2, what, (b, at) => b.readInt16LE(at));
      case 'u32':
        return this.u32(what);
      case 'i32':
        return this.read(4, what, (b, at) => b.readInt32LE(at));
      case 'f32':
        return this.read(4, what, (b, at) => b.readFloatLE(at));
      case 'u64':
        return this.u64(what);
      case 'i64': {
        const v = this.read(8, what, (b, at) => b.readBigInt64LE(at));
        if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
          throw bad(this.path, `${what} is out of range (${v})`);
        }
        return Number(v);
      }
      case 'f64':
        return this.read(8, what, (b, at) => b.readDoubleLE(at));
    }
  }

  bool(what: string): boolean {
    const v = this.read(1, what, (b, at) => b.readUInt8(at));
    if (v > 1) throw bad(this.path, `${what} is not a boolean (${v})`);
    return v === 1;
  }

  string(what: string): string {
    const length = this.u64(`${what} length`);
    if (length > LIMITS.ggufStringBytesMax) throw bad(this.path, `${what} is ${length} bytes long`);
    return this.read(length, what, (b, at) => b.toString('utf8', at, at + length));
  }
}

function readValueType(cursor: FileCursor, path: string, what: string): GgufScalarType | 'array' {
  const code = cursor.u32(`${what} type`);
  const type = VALUE_TYPES_BY_CODE.get(code);
  if (type === undefined) throw bad(path, `${what} has unknown value type ${code}`);
  return type;
}

/** Reads one metadata value; `itemsBefore` array items have been read before it (bounded together, LIMITS). */
function readValue(cursor: FileCursor, path: string, key: string, itemsBefore: number): GgufValue {
  const type = readValueType(cursor, path, key);
  if (type === 'string') return { type, value: cursor.string(key) };
  if (type === 'bool') return { type, value: cursor.bool(key) };
  if (type !== 'array') return { type, value: cursor.number(type, key) };
  const itemType = readValueType(cursor, path, `${key} items`);
  const count = cursor.u64(`${key} count`);
  if (itemsBefore + count > LIMITS.ggufMetadataItemsMax) {
    throw bad(
      path,
      `array ${key} has ${count} items, after ${itemsBefore} in earlier arrays: over the limit of ` +
        `${LIMITS.ggufMetadataItemsMax} metadata array items in all (LIMITS.ggufMetadataItemsMax)`,
    );
  }
  if (itemType === 'array') throw bad(path, `nested arrays are not supported (${key})`);
  if (itemType === 'string') {
    const value: string[] = [];
    for (let i = 0; i < count; i++) value.push(cursor.string(key));
    return { type, itemType, value };
  }
  if (itemType === 'bool') {
    const value: boolean[] = [];
    for (let i = 0; i < count; i++) value.push(cursor.bool(key));
    return { type, itemType, value };
  }
  const value: number[] = [];
  for (let i = 0; i < count; i++) value.push(cursor.number(itemType, key));
  return { type, itemType, value };
}

function readTensorInfo(cursor: FileCursor, path: string): Omit<GgufTensorInfo, 'fileOffset'> & { offset: number } {
  const name = cursor.string('tensor name');
  const dimCount = cursor.u32(`${name} dimension count`);
  if (dimCount < 1 || dimCount > LIMITS.ggufTensorDimsMax) throw bad(path, `tensor ${name} has ${dimCount} dimensions`);
  const dims: number[] = [];
  for (let i = 0; i < dimCount; i++) {
    const d = cursor.u64(`${name} dimension`);
    if (d < 1) throw bad(path, `tensor ${name} has an empty dimension`);
    dims.push(d);
  }
  const typeCode = cursor.u32(`${name} type`);
  const dtype = DTYPES_BY_CODE.get(typeCode);
  if (dtype === undefined) {
    const typeName = GGML_UNSUPPORTED_TYPE_NAMES.get(typeCode) ?? 'unknown';
    throw new KvfenceError(
      'unsupported_model',
      `${path}: tensor ${name} has ggml type ${typeName} (${typeCode}); kvfence reads ${SUPPORTED_TYPES} weights`,
    );
  }
  const count = elementCount(dims);
  if (!Number.isSafeInteger(count)) throw bad(path, `tensor ${name} is too large`);
  if (dims[0]! % blockSize(dtype) !== 0) {
    throw bad(path, `${dtype} tensor ${name} has a row of ${dims[0]} values, not a multiple of ${blockSize(dtype)}`);
  }
  const offset = cursor.u64(`${name} offset`);
  return { name, dtype, dims, offset, byteSize: tensorByteSize(dtype, count) };
}

export function openFileForReading(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new KvfenceError('file_not_found', `${path}: no such file`);
    if (code === 'EISDIR') throw new KvfenceError('invalid_model_file', `${path}: is a directory`);
    throw new KvfenceError('invalid_model_file', `${path}: cannot open (${code ?? 'unknown error'})`);
  }
  if (fstatSync(fd).isDirectory()) {
    closeSync(fd); // Linux opens a directory for reading; reading it is what fails
    throw new KvfenceError('invalid_model_file', `${path}: is a directory`);
  }
  return fd;
}

function parseHeader(fd: number, path: string): GgufHeader {
  const fileSize = fstatSync(fd).size;
  if (fileSize === 0) throw bad(path, 'the file is empty');
  const cursor = new FileCursor(fd, fileSize, path);
  if (fileSize < 4 || cursor.u32('magic') !== GGUF_MAGIC) throw bad(path, 'wrong magic (expected "GGUF")');
  const version = cursor.u32('version');
  if (version !== 2 && version !== 3) throw bad(path, `version ${version} is not supported (2 and 3 are)`);
  const tensorCount = cursor.u64('tensor count');
  const entryCount = cursor.u64('metadata count');
  if (tensorCount > LIMITS.ggufTensorCountMax) throw bad(path, `${tensorCount} tensors`);
  if (entryCount > LIMITS.ggufMetadataEntriesMax) throw bad(path, `${entryCount} metadata entries`);

  const metadata: GgufMetadata = new Map();
  let arrayItems = 0;
  for (let i = 0; i < entryCount; i++) {
    const key = cursor.string('metadata key');
    if (metadata.has(key)) throw bad(path, `duplicate metadata key ${key}`);
    const value = readValue(cursor, path, key, arrayItems);
    if (value.type === 'array') arrayItems += value.value.length;
    metadata.set(key, value);
  }
  const alignment = metaNumber(metadata, 'general.alignment') ?? GGUF_DEFAULT_ALIGNMENT;
  if (
    !Number.isInteger(alignment) ||
    alignment < 1 ||
    alignment > LIMITS.ggufAlignmentMax ||
    alignment & (alignment - 1)
  ) {
    throw bad(path, `general.alignment ${alignment} is not a power of two`);
  }

  const infos = [];
  for (let i = 0; i < tensorCount; i++) infos.push(readTensorInfo(cursor, path));
  const dataOffset = Math.ceil(cursor.position / alignment) * alignment;
  const names = new Set<string>();
  const tensors = infos.map(({ offset, ...info }) => {
    if (names.has(info.name)) throw bad(path, `duplicate tensor ${info.name}`);
    names.add(info.name);
    if (offset % alignment !== 0)
      throw bad(path, `tensor ${info.name} offset ${offset} is not aligned to ${alignment}`);
    const fileOffset = dataOffset + offset;
    if (fileOffset + info.byteSize > fileSize) {
      throw bad(
        path,
        `tensor ${info.name} ends at byte ${fileOffset + info.byteSize}, past the end of the file (${fileSize})`,
      );
    }
    return { ...info, fileOffset };
  });
  refuseOverlaps(tensors, path);
  return { path, version, metadata, tensors, alignment, dataOffset, fileSize };
}

/**
 * Tensors may not share bytes (llama.cpp's reader insists on them lying back to back): so the weight arena, which
 * gives each its own copy, is never larger than the file plus alignment.
 */
function refuseOverlaps(tensors: readonly GgufTensorInfo[], path: string): void {
  const byOffset = [...tensors].sort((a, b) => a.fileOffset - b.fileOffset);
  for (let i = 1; i < byOffset.length; i++) {
    const before = byOffset[i - 1]!;
    const after = byOffset[i]!;
    if (before.fileOffset + before.byteSize > after.fileOffset)
      throw bad(path, `tensors ${before.name} and ${after.name} overlap`);
  }
}

/**
 * Where each tensor starts in the weight arena: a multiple of 64 bytes from the arena's start (the arena itself starts
 * where the allocator puts it; glibc's large blocks start 16 bytes into a page, and the kernels load unaligned: a
 * decode token took the same time with its matrices at each of the four 16-byte offsets, docs/native.md).
 */
const TENSOR_ALIGNMENT = 64;

function tensorView(dtype: WeightDType, buffer: ArrayBuffer, offset: number, info: GgufTensorInfo): GgufTensor['data'] {
  if (isQuantized(dtype)) return new Uint8Array(buffer, offset, info.byteSize);
  const count = elementCount(info.dims);
  return dtype === 'f32' ? new Float32Array(buffer, offset, count) : new Uint16Array(buffer, offset, count);
}

/** Memory for the weight arena (the model loader passes compute/weight-arena.ts's, which advises huge pages). */
export type ArenaAllocator = (bytes: number) => ArrayBuffer;

/** Reads only the header: metadata and the tensor table (for `model inspect` and for validation before loading). */
export function readGgufHeader(path: string): GgufHeader {
  const fd = openFileForReading(path);
  try {
    return parseHeader(fd, path);
  } finally {
    closeSync(fd);
  }
}

export interface GgufFile {
  header: GgufHeader;
  tensors: Map<string, GgufTensor>;
  /** the size of the buffer every tensor lives in */
  arenaBytes: number;
  /** the tensors widened from Q5_0 into Q8_0 blocks (widen-q5-0.ts), and the bytes that added to the arena */
  widened: { tensors: number; addedBytes: number };
}

export interface ReadOptions {
  /** memory for the weight arena (default: a plain ArrayBuffer) */
  allocate?: ArenaAllocator;
  /** runs between the header and the tensors, so a file its header already refuses costs no arena and no read */
  checkHeader?: (header: GgufHeader) => void;
  /** keep Q5_0 tensors as Q8_0 blocks of the same values (widen-q5-0.ts) */
  widenQ5_0?: boolean;
}

/** Q5_0 blocks read at a time into the staging buffer of a widened tensor (1.4 MB) */
const WIDEN_STAGING_BLOCKS = 1 << 16;

/** Reads the header and every tensor, each straight into its place in one arena (a widened one through a staging buffer). */
export function readGguf(path: string, options: ReadOptions = {}): GgufFile {
  const { allocate = (bytes: number) => new ArrayBuffer(bytes), checkHeader = () => {} } = options;
  const fd = openFileForReading(path);
  try {
    const header = parseHeader(fd, path);
    checkHeader(header);
    const kept = header.tensors.map((info) =>
      options.widenQ5_0 === true && info.dtype === 'q5_0'
        ? { ...info, dtype: 'q8_0' as const, byteSize: widenedBytes(info.byteSize) }
        : info,
    );
    const offsets: number[] = [];
    let arenaBytes = 0;
    for (const info of kept) {
      offsets.push(arenaBytes);
      arenaBytes += Math.ceil(info.byteSize / TENSOR_ALIGNMENT) * TENSOR_ALIGNMENT;
    }
    const arena = allocate(arenaBytes);
    const tensors = new Map<string, GgufTensor>();
    const widened = { tensors: 0, addedBytes: 0 };
    let staging: Uint8Array | undefined;
    for (const [i, info] of kept.entries()) {
      const stored = header.tensors[i]!;
      const data = tensorView(info.dtype, arena, offsets[i]!, info);
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      if (info.dtype === stored.dtype) {
        readRange(fd, path, stored, bytes, 0);
      } else {
        staging ??= new Uint8Array(WIDEN_STAGING_BLOCKS * QUANT_BLOCKS.q5_0.bytes);
        for (let done = 0; done < stored.byteSize; done += staging.length) {
          const piece = staging.subarray(0, Math.min(staging.length, stored.byteSize - done));
          readRange(fd, path, stored, piece, done);
          const at = widenedBytes(done);
          widenQ5_0(piece, bytes.subarray(at, at + widenedBytes(piece.length)));
        }
        widened.tensors++;
        widened.addedBytes += info.byteSize - stored.byteSize;
      }
      tensors.set(info.name, { name: info.name, dtype: info.dtype, dims: info.dims, data });
    }
    return { header, tensors, arenaBytes, widened };
  } finally {
    closeSync(fd);
  }
}

/** Fills `into` with the tensor's bytes from `from` on. */
function readRange(fd: number, path: string, info: GgufTensorInfo, into: Uint8Array, from: number): void {
  let done = 0;
  while (done < into.length) {
    const at = info.fileOffset + from + done;
    const got = readSync(fd, into, done, Math.min(into.length - done, READ_BYTES_MAX), at);
    if (got === 0) throw bad(path, `truncated inside tensor ${info.name}`);
    done += got;
  }
}
