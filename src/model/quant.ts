/**
 * Weight storage formats: conversion from f32 when writing test models, and row dequantization when reading.
 * Q8_0 follows ggml's reference quantize_row_q8_0: per block of 32, d = max|x| / 127 stored as f16, q = round(x / d).
 * The other block types are in quant-legacy.ts (Q4_0 … Q5_1) and quant-kquants.ts (Q2_K … Q6_K); every dequantization
 * is ggml's reference one, bit for bit.
 */
import { assert } from '../util/assert.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../util/half.js';
import {
  Q8_0_BLOCK_BYTES,
  Q8_0_BLOCK_SIZE,
  QUANT_BLOCKS,
  type QuantizedDType,
  type TensorData,
  type WeightDType,
} from './gguf-types.js';
import { dequantizeKBlock, quantizeKBlock } from './quant-kquants.js';
import { dequantizeLegacyBlock, type LegacyDType, quantizeLegacyBlock } from './quant-legacy.js';

function isLegacy(dtype: WeightDType): dtype is LegacyDType {
  return dtype === 'q4_0' || dtype === 'q4_1' || dtype === 'q5_0' || dtype === 'q5_1';
}

export function quantizeQ8_0(values: Float32Array): Uint8Array {
  assert(values.length % Q8_0_BLOCK_SIZE === 0, 'q8_0 needs whole blocks of 32');
  const blockCount = values.length / Q8_0_BLOCK_SIZE;
  const out = new Uint8Array(blockCount * Q8_0_BLOCK_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < blockCount; b++) {
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK_SIZE; j++) amax = Math.max(amax, Math.abs(values[b * Q8_0_BLOCK_SIZE + j]!));
    const d = Math.fround(amax / 127);
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    view.setUint16(b * Q8_0_BLOCK_BYTES, f32ToF16(d), true);
    for (let j = 0; j < Q8_0_BLOCK_SIZE; j++) {
      // C's roundf: half away from zero.
      const x = Math.fround(values[b * Q8_0_BLOCK_SIZE + j]! * id);
      view.setInt8(b * Q8_0_BLOCK_BYTES + 2 + j, Math.sign(x) * Math.round(Math.abs(x)));
    }
  }
  return out;
}

function quantizeBlocks(values: Float32Array, dtype: Exclude<QuantizedDType, 'q8_0'>): Uint8Array {
  const { size, bytes: blockBytes } = QUANT_BLOCKS[dtype];
  assert(values.length % size === 0, `${dtype} needs whole blocks of ${size}`);
  const out = new Uint8Array((values.length / size) * blockBytes);
  const view = new DataView(out.buffer);
  for (let b = 0; b < values.length / size; b++) {
    if (isLegacy(dtype)) quantizeLegacyBlock(dtype, values, b * size, view, b * blockBytes);
    else quantizeKBlock(dtype, values, b * size, out, view, b * blockBytes);
  }
  return out;
}

/** Converts f32 values to the storage of `dtype`. */
export function encodeWeights(values: Float32Array, dtype: WeightDType): TensorData {
  switch (dtype) {
    case 'f32':
      return values;
    case 'f16':
      return Uint16Array.from(values, f32ToF16);
    case 'bf16':
      return Uint16Array.from(values, f32ToBf16);
    case 'q8_0':
      return quantizeQ8_0(values);
    default:
      return quantizeBlocks(values, dtype);
  }
}

/**
 * Dequantizes `count` values starting at element `start` (both multiples of the block size for quantized types) into
 * `out`.
 */
export function decodeWeights(
  data: TensorData,
  dtype: WeightDType,
  start: number,
  count: number,
  out: Float32Array,
  outOffset = 0,
): void {
  switch (dtype) {
    case 'f32':
      out.set((data as Float32Array).subarray(start, start + count), outOffset);
      return;
    case 'f16':
      for (let i = 0; i < count; i++) out[outOffset + i] = f16ToF32(data[start + i]!);
      return;
    case 'bf16':
      for (let i = 0; i < count; i++) out[outOffset + i] = bf16ToF32(data[start + i]!);
      return;
    case 'q8_0': {
      assert(start % Q8_0_BLOCK_SIZE === 0 && count % Q8_0_BLOCK_SIZE === 0, 'q8_0 rows are whole blocks');
      const bytes = data as Uint8Array;
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (let i = 0; i < count; i += Q8_0_BLOCK_SIZE) {
        const block = ((start + i) / Q8_0_BLOCK_SIZE) * Q8_0_BLOCK_BYTES;
        const d = f16ToF32(view.getUint16(block, true));
        for (let j = 0; j < Q8_0_BLOCK_SIZE; j++) out[outOffset + i + j] = d * view.getInt8(block + 2 + j);
      }
      return;
    }
    default: {
      const { size, bytes: blockBytes } = QUANT_BLOCKS[dtype];
      assert(start % size === 0 && count % size === 0, `${dtype} rows are whole blocks of ${size}`);
      const bytes = data as Uint8Array;
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (let i = 0; i < count; i += size) {
        const at = ((start + i) / size) * blockBytes;
        if (isLegacy(dtype)) dequantizeLegacyBlock(dtype, bytes, view, at, out, outOffset + i);
        else dequantizeKBlock(dtype, bytes, view, at, out, outOffset + i);
      }
    }
  }
}
