/**
 * ggml's 32-value block types Q4_0, Q4_1, Q5_0 and Q5_1 (layouts in ggml-common.h).
 *
 * Dequantization is ggml's reference dequantize_row_* operation for operation in f32 (Math.fround after every
 * multiply and add, no fused operations), so the values are llama.cpp's bit for bit. The quantizers are kvfence's own:
 * round to the nearest level with the stored (f16-rounded) scale, which is all a writer needs — llama.cpp reads the
 * bytes kvfence writes, whatever search produced them.
 */
import { f16ToF32, f32ToF16 } from '../util/half.js';

export type LegacyDType = 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1';

const fr = Math.fround;

/** The level nearest to `x / d` (C's roundf: half away from zero), clamped to [lo, hi]; 0 when d is 0. */
export function level(x: number, d: number, lo: number, hi: number): number {
  if (d === 0) return Math.min(hi, Math.max(lo, 0));
  const t = x / d;
  const r = Math.sign(t) * Math.round(Math.abs(t));
  return Math.min(hi, Math.max(lo, r));
}

/** Quantizes one block of 32 values at `x[from..]` into `out` at `at`. */
export function quantizeLegacyBlock(
  dtype: LegacyDType,
  x: Float32Array,
  from: number,
  out: DataView,
  at: number,
): void {
  const bits = dtype === 'q4_0' || dtype === 'q4_1' ? 4 : 5;
  const top = (1 << bits) - 1;
  const codes = new Uint8Array(32);
  let headerBytes: number;
  if (dtype === 'q4_0' || dtype === 'q5_0') {
    // symmetric: the value of largest magnitude maps to the lowest level, as ggml's reference does
    let signedMax = 0;
    for (let j = 0; j < 32; j++) if (Math.abs(x[from + j]!) > Math.abs(signedMax)) signedMax = x[from + j]!;
    const dBits = f32ToF16(fr(signedMax / -(1 << (bits - 1))));
    out.setUint16(at, dBits, true);
    const d = f16ToF32(dBits);
    for (let j = 0; j < 32; j++)
      codes[j] = level(x[from + j]!, d, -(1 << (bits - 1)), (1 << (bits - 1)) - 1) + (1 << (bits - 1));
    headerBytes = 2;
  } else {
    let min = Number.POSITIVE_INFINITY;
    let max = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < 32; j++) {
      min = Math.min(min, x[from + j]!);
      max = Math.max(max, x[from + j]!);
    }
    const dBits = f32ToF16(fr((max - min) / top));
    const mBits = f32ToF16(min);
    out.setUint16(at, dBits, true);
    out.setUint16(at + 2, mBits, true);
    const d = f16ToF32(dBits);
    const m = f16ToF32(mBits);
    for (let j = 0; j < 32; j++) codes[j] = level(x[from + j]! - m, d, 0, top);
    headerBytes = 4;
  }
  let qsAt = at + headerBytes;
  if (bits === 5) {
    let qh = 0;
    for (let j = 0; j < 32; j++) qh |= (codes[j]! >> 4) << j;
    out.setUint32(qsAt, qh >>> 0, true);
    qsAt += 4;
  }
  for (let j = 0; j < 16; j++) out.setUint8(qsAt + j, (codes[j]! & 0xf) | ((codes[j + 16]! & 0xf) << 4));
}

/** dequantize_row_q4_0 / q4_1 / q5_0 / q5_1 for one block: 32 values into `out` at `outAt`. */
export function dequantizeLegacyBlock(
  dtype: LegacyDType,
  bytes: Uint8Array,
  view: DataView,
  at: number,
  out: Float32Array,
  outAt: number,
): void {
  const d = f16ToF32(view.getUint16(at, true));
  switch (dtype) {
    case 'q4_0':
      for (let j = 0; j < 16; j++) {
        const b = bytes[at + 2 + j]!;
        out[outAt + j] = fr(((b & 0xf) - 8) * d);
        out[outAt + j + 16] = fr(((b >> 4) - 8) * d);
      }
      return;
    case 'q4_1': {
      const m = f16ToF32(view.getUint16(at + 2, true));
      for (let j = 0; j < 16; j++) {
        const b = bytes[at + 4 + j]!;
        out[outAt + j] = fr(fr((b & 0xf) * d) + m);
        out[outAt + j + 16] = fr(fr((b >> 4) * d) + m);
      }
      return;
    }
    case 'q5_0': {
      const qh = view.getUint32(at + 2, true);
      for (let j = 0; j < 16; j++) {
        const b = bytes[at + 6 + j]!;
        out[outAt + j] = fr((((b & 0xf) | (((qh >>> j) & 1) << 4)) - 16) * d);
        out[outAt + j + 16] = fr((((b >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16) * d);
      }
      return;
    }
    case 'q5_1': {
      const m = f16ToF32(view.getUint16(at + 2, true));
      const qh = view.getUint32(at + 4, true);
      for (let j = 0; j < 16; j++) {
        const b = bytes[at + 8 + j]!;
        out[outAt + j] = fr(fr(((b & 0xf) | (((qh >>> j) & 1) << 4)) * d) + m);
        out[outAt + j + 16] = fr(fr(((b >> 4) | (((qh >>> (j + 16)) & 1) << 4)) * d) + m);
      }
      return;
    }
  }
}
