/**
 * Bounds-checked little-endian reads and writes for transfer frames. A read past the end is a truncated frame, never an
 * out-of-bounds access; a write past the end is a bug (the size is computed first).
 */

import { TransferError } from '../transfer/transfer-error.js';
import { assert } from './assert.js';

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });
const utf8Encoder = new TextEncoder();

export function utf8Bytes(text: string): Uint8Array {
  return utf8Encoder.encode(text);
}

export class ByteReader {
  private offset = 0;
  private readonly view: DataView;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get remaining(): number {
    return this.bytes.byteLength - this.offset;
  }

  u8(): number {
    this.need(1);
    return this.view.getUint8(this.offset++);
  }

  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.offset, true);
    this.offset += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.offset, true);
    this.offset += 4;
    return v;
  }

  u64(): bigint {
    this.need(8);
    const v = this.view.getBigUint64(this.offset, true);
    this.offset += 8;
    return v;
  }

  f64(): number {
    this.need(8);
    const v = this.view.getFloat64(this.offset, true);
    this.offset += 8;
    return v;
  }

  /** A view (no copy) of the next `length` bytes. */
  bytesView(length: number): Uint8Array {
    this.need(length);
    const v = this.bytes.subarray(this.offset, this.offset + length);
    this.offset += length;
    return v;
  }

  utf8(length: number): string {
    try {
      return utf8Decoder.decode(this.bytesView(length));
    } catch (error) {
      if (error instanceof TransferError) throw error;
      throw new TransferError('malformed_frame', 'a text field is not valid UTF-8');
    }
  }

  /** Every frame is read to its last byte: trailing bytes mean the peer speaks something else. */
  end(): void {
    if (this.remaining !== 0) throw new TransferError('malformed_frame', `${this.remaining} unexpected trailing bytes`);
  }

  private need(length: number): void {
    if (this.offset + length > this.bytes.byteLength) {
      throw new TransferError(
        'frame_truncated',
        `frame ends ${this.offset + length - this.bytes.byteLength} bytes early`,
      );
    }
  }
}

export class ByteWriter {
  private offset = 0;
  readonly bytes: Uint8Array;
  private readonly view: DataView;

  constructor(size: number) {
    this.bytes = new Uint8Array(size);
    this.view = new DataView(this.bytes.buffer);
  }

  u8(v: number): this {
    this.room(1);
    this.view.setUint8(this.offset++, v);
    return this;
  }

  u16(v: number): this {
    this.room(2);
    this.view.setUint16(this.offset, v, true);
    this.offset += 2;
    return this;
  }

  u32(v: number): this {
    this.room(4);
    this.view.setUint32(this.offset, v, true);
    this.offset += 4;
    return this;
  }

  u64(v: bigint): this {
    this.room(8);
    this.view.setBigUint64(this.offset, v, true);
    this.offset += 8;
    return this;
  }

  f64(v: number): this {
    this.room(8);
    this.view.setFloat64(this.offset, v, true);
    this.offset += 8;
    return this;
  }

  raw(bytes: Uint8Array): this {
    this.room(bytes.byteLength);
    this.bytes.set(bytes, this.offset);
    this.offset += bytes.byteLength;
    return this;
  }

  /** The finished buffer; every byte must have been written. */
  done(): Uint8Array {
    assert(
      this.offset === this.bytes.byteLength,
      `frame writer filled ${this.offset} of ${this.bytes.byteLength} bytes`,
    );
    return this.bytes;
  }

  private room(length: number): void {
    assert(this.offset + length <= this.bytes.byteLength, 'frame writer overflow');
  }
}
