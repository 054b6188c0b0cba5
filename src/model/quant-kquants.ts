/**
 * ggml's K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: 256-value super-blocks of 16 or 8 sub-blocks, each with its own
 * small integer scale (and min), scaled by f16 super-block factors (layouts in ggml-common.h).
 *
 * Dequantization follows ggml's reference dequantize_row_*_K operation for operation in f32 (Math.fround after each
 * multiply and subtract, in ggml's order: the sub-block scale d·sc is rounded first, then multiplied by the quant), so
 * the values are llama.cpp's bit for bit. Each value is found from its position in the super-block:
 * - Q2_K, Q3_K: 2-bit quants at byte 32·(p/128) + 16·(p/16 mod 2) + p mod 16, shifted by 2·(p/32 mod 4); Q3_K's third
 *   bit is bit 4·(p/128) + p/32 mod 4 of hmask byte 16·(p/16 mod 2) + p mod 16. Scale index p/16.
 * - Q4_K, Q5_K: sub-block s = p/32; the nibble of byte 32·(s/2) + p mod 32 (high nibble for odd s); Q5_K's fifth bit is
 *   bit s of qh byte p mod 32. Scale and min s unpacked from 12 bytes of 6-bit fields (get_scale_min_k4).
 * - Q6_K: 4 low bits from ql byte 64·(p/128) + 32·(g mod 2) + p mod 32 (high nibble for g ≥ 2, g = p/32 mod 4), 2 high
 *   bits 2g..2g+1 of qh byte 32·(p/128) + p mod 32. Scale index p/16 (int8).
 *
 * The quantizers are kvfence's own and simple (nearest level with the stored scales; no search as llama.cpp's
 * make_qkx2_quants does): correct, a little less accurate than llama-quantize's.
 */
import { f16ToF32, f32ToF16 } from '../util/half.js';
import { level } from './quant-legacy.js';

export type KQuantDType = 'q2_k' | 'q3_k' | 'q4_k' | 'q5_k' | 'q6_k';

const fr = Math.fround;
const QK = 256;

/** get_scale_min_k4: scale and min of sub-block j (0..7) from the 12 packed bytes at `at`. */
function scaleMinK4(bytes: Uint8Array, at: number, j: number): [number, number] {
  if (j < 4) return [bytes[at + j]! & 63, bytes[at + j + 4]! & 63];
  return [
    (bytes[at + j + 4]! & 0xf) | ((bytes[at + j - 4]! >> 6) << 4),
    (bytes[at + j + 4]! >> 4) | ((bytes[at + j]! >> 6) << 4),
  ];
}

/** Q3_K's 16 scales (0..63, stored +32) from the 12 packed bytes at `at`. */
function scalesQ3K(bytes: Uint8Array, at: number, i: number): number {
  const k = i & 3;
  const g = i >> 2;
  const low =
    g === 0
      ? bytes[at + k]! & 0xf
      : g === 1
        ? bytes[at + 4 + k]! & 0xf
        : g === 2
          ? bytes[at + k]! >> 4
          : bytes[at + 4 + k]! >> 4;
  return low | (((bytes[at + 8 + k]! >> (2 * g)) & 3) << 4);
}

/** Dequantizes one super-block (256 values) at byte `at` into `out` at `outAt`. */
export function dequantizeKBlock(
  dtype: KQuantDType,
  bytes: Uint8Array,
  view: DataView,
  at: number,
  out: Float32Array,
  outAt: number,
): void {
  switch (dtype) {
    case 'q2_k': {
      const d = f16ToF32(view.getUint16(at + 80, true));
      const dmin = f16ToF32(view.getUint16(at + 82, true));
      for (let s = 0; s < 16; s++) {
        const sc = bytes[at + s]!;
        const dl = fr(d * (sc & 0xf));
        const ml = fr(dmin * (sc >> 4));
        for (let l = 0; l < 16; l++) {
          const p = s * 16 + l;
          const q = (bytes[at + 16 + 32 * (p >> 7) + 16 * ((p >> 4) & 1) + l]! >> (2 * ((p >> 5) & 3))) & 3;
          out[outAt + p] = fr(fr(dl * q) - ml);
        }
      }
      return;
    }
    case 'q3_k': {
      const d = f16ToF32(view.getUint16(at + 108, true));
      for (let s = 0; s < 16; s++) {
        const dl = fr(d * (scalesQ3K(bytes, at + 96, s) - 32));
        for (let l = 0; l < 16; l++) {
          const p = s * 16 + l;
          const j = (p >> 5) & 3;
          const low = (bytes[at + 32 + 32 * (p >> 7) + 16 * ((p >> 4) & 1) + l]! >> (2 * j)) & 3;
          const high = (bytes[at + 16 * ((p >> 4) & 1) + l]! >> (4 * (p >> 7) + j)) & 1;
          out[outAt + p] = fr(dl * (low - (high !== 0 ? 0 : 4)));
        }
      }
      return;
    }
    case 'q4_k':
    case 'q5_k': {
      const d = f16ToF32(view.getUint16(at, true));
      const dmin = f16ToF32(view.getUint16(at + 2, true));
      const five = dtype === 'q5_k';
      const qs = at + (five ? 48 : 16);
      for (let s = 0; s < 8; s++) {
        const [sc, m] = scaleMinK4(bytes, at + 4, s);
        const d1 = fr(d * sc);
        const m1 = fr(dmin * m);
        for (let l = 0; l < 32; l++) {
          const b = bytes[qs + 32 * (s >> 1) + l]!;
          let q = s & 1 ? b >> 4 : b & 0xf;
          if (five) q += ((bytes[at + 16 + l]! >> s) & 1) * 16;
          out[outAt + s * 32 + l] = fr(fr(d1 * q) - m1);
        }
      }
      return;
    }
    case 'q6_k': {
      const d = f16ToF32(view.getUint16(at + 208, true));
      for (let s = 0; s < 16; s++) {
        const dl = fr(d * view.getInt8(at + 192 + s));
        for (let l = 0; l < 16; l++) {
          const p = s * 16 + l;
          const c = p >> 7;
          const g = (p >> 5) & 3;
          const ql = bytes[at + 64 * c + 32 * (g & 1) + (p & 31)]!;
          const low = g >= 2 ? ql >> 4 : ql & 0xf;
          const high = (bytes[at + 128 + 32 * c + (p & 31)]! >> (2 * g)) & 3;
          out[outAt + p] = fr(dl * ((low | (high << 4)) - 32));
        }
      }
      return;
    }
  }
}

function or(bytes: Uint8Array, at: number, bits: number): void {
  bytes[at] = bytes[at]! | bits;
}

/** Sub-block scale factors of one super-block quantized to `levels` steps of a super-block factor stored in f16. */
function superScale(values: number[], top: number): { bits: number; d: number; codes: number[] } {
  let max = 0;
  for (const v of values) max = Math.max(max, Math.abs(v));
  const bits = f32ToF16(fr(max / top));
  const d = f16ToF32(bits);
  return { bits, d, codes: values.map((v) => level(v, d, -top - 1, top)) };
}

/** Quantizes one super-block of 256 values at `x[from..]` into `out` (a zeroed block) at `at`. */
export function quantizeKBlock(
  dtype: KQuantDType,
  x: Float32Array,
  from: number,
  bytes: Uint8Array,
  view: DataView,
  at: number,
): void {
  switch (dtype) {
    case 'q2_k':
    case 'q4_k':
    case 'q5_k': {
      // asymmetric: value = d·sc·q − dmin·m with q in [0, top] and a non-negative min per sub-block
      const sub = dtype === 'q2_k' ? 16 : 32;
      const top = dtype === 'q2_k' ? 3 : dtype === 'q4_k' ? 15 : 31;
      const scaleTop = dtype === 'q2_k' ? 15 : 63;
      const count = QK / sub;
      const scales: number[] = [];
      const mins: number[] = [];
      for (let s = 0; s < count; s++) {
        let min = 0;
        let max = 0;
        for (let l = 0; l < sub; l++) {
          min = Math.min(min, x[from + s * sub + l]!);
          max = Math.max(max, x[from + s * sub + l]!);
        }
        scales.push((max - min) / top);
        mins.push(-min);
      }
      const sc = superScale(scales, scaleTop);
      const mn = superScale(mins, scaleTop);
      const scCodes = sc.codes.map((c) => Math.max(0, c));
      const mCodes = mn.codes.map((c) => Math.max(0, c));
      if (dtype === 'q2_k') {
        view.setUint16(at + 80, sc.bits, true);
        view.setUint16(at + 82, mn.bits, true);
        for (let s = 0; s < 16; s++) bytes[at + s] = scCodes[s]! | (mCodes[s]! << 4);
      } else {
        view.setUint16(at, sc.bits, true);
        view.setUint16(at + 2, mn.bits, true);
        for (let j = 0; j < 8; j++) {
          if (j < 4) {
            or(bytes, at + 4 + j, scCodes[j]!);
            or(bytes, at + 4 + j + 4, mCodes[j]!);
          } else {
            bytes[at + 4 + j + 4] = (scCodes[j]! & 0xf) | ((mCodes[j]! & 0xf) << 4);
            or(bytes, at + 4 + j - 4, (scCodes[j]! >> 4) << 6);
            or(bytes, at + 4 + j, (mCodes[j]! >> 4) << 6);
          }
        }
      }
      for (let s = 0; s < count; s++) {
        const d1 = fr(sc.d * scCodes[s]!);
        const m1 = fr(mn.d * mCodes[s]!);
        for (let l = 0; l < sub; l++) {
          const p = s * sub + l;
          const q = level(x[from + p]! + m1, d1, 0, top);
          if (dtype === 'q2_k') {
            or(bytes, at + 16 + 32 * (p >> 7) + 16 * ((p >> 4) & 1) + (p & 15), q << (2 * ((p >> 5) & 3)));
          } else {
            const qs = at + (dtype === 'q5_k' ? 48 : 16) + 32 * (s >> 1) + l;
            or(bytes, qs, (q & 0xf) << (s & 1 ? 4 : 0));
            if (dtype === 'q5_k') or(bytes, at + 16 + l, (q >> 4) << s);
          }
        }
      }
      return;
    }
    case 'q3_k':
    case 'q6_k': {
      // symmetric: value = d·sc·q, the value of largest magnitude of each sub-block at the lowest level
      const lowest = dtype === 'q3_k' ? 4 : 32;
      const scales: number[] = [];
      for (let s = 0; s < 16; s++) {
        let signedMax = 0;
        for (let l = 0; l < 16; l++) {
          const v = x[from + s * 16 + l]!;
          if (Math.abs(v) > Math.abs(signedMax)) signedMax = v;
        }
        scales.push(signedMax / -lowest);
      }
      const sc = superScale(scales, dtype === 'q3_k' ? 31 : 127);
      if (dtype === 'q3_k') {
        view.setUint16(at + 108, sc.bits, true);
        for (let i = 0; i < 16; i++) {
          const v = sc.codes[i]! + 32;
          const k = i & 3;
          const g = i >> 2;
          const low = v & 0xf;
          const lowAt = at + 96 + (g & 1 ? 4 : 0) + k;
          or(bytes, lowAt, g >= 2 ? low << 4 : low);
          or(bytes, at + 96 + 8 + k, (v >> 4) << (2 * g));
        }
      } else {
        view.setUint16(at + 208, sc.bits, true);
        for (let i = 0; i < 16; i++) view.setInt8(at + 192 + i, sc.codes[i]!);
      }
      for (let s = 0; s < 16; s++) {
        const dl = fr(sc.d * sc.codes[s]!);
        for (let l = 0; l < 16; l++) {
          const p = s * 16 + l;
          const q = level(x[from + p]!, dl, -lowest, lowest - 1) + lowest;
          const c = p >> 7;
          if (dtype === 'q3_k') {
            const j = (p >> 5) & 3;
            or(bytes, at + 32 + 32 * c + 16 * ((p >> 4) & 1) + (p & 15), (q & 3) << (2 * j));
            or(bytes, at + 16 * ((p >> 4) & 1) + (p & 15), (q >> 2) << (4 * c + j));
          } else {
            const g = (p >> 5) & 3;
            or(bytes, at + 64 * c + 32 * (g & 1) + (p & 31), (q & 0xf) << (g >= 2 ? 4 : 0));
            or(bytes, at + 128 + 32 * c + (p & 31), (q >> 4) << (2 * g));
          }
        }
      }
      return;
    }
  }
}
