/**
 * The Q8 activations' arithmetic (native/src/q8x-body.inc, docs/native.md "Q8 activations") written out in
 * TypeScript, every f32 operation correctly rounded, so a test can hold the native kernels to it bit for bit.
 * Products, quotients and sums of two f32 values are correctly rounded in f64 and then to f32; the one fused
 * multiply-add a block needs is rounded once by hand (fmaF32).
 */
import { f16ToF32 } from '../../src/util/half.js';

const f32 = Math.fround;
const bits = new Float32Array(1);
const word = new Uint32Array(bits.buffer);

/** The next f32 after f (finite) in the direction of the larger values. */
function nextUp(f: number): number {
  if (f === 0) return 2 ** -149;
  bits[0] = f;
  word[0] = f > 0 ? word[0]! + 1 : word[0]! - 1;
  return bits[0]!;
}

/**
 * a · b + c rounded once to f32, for f32 a and c and b with a · b exact in f64 (b an f32, or an integer below 2^29). The sum
 * is rounded to f64 with its error kept (TwoSum); rounding that to f32 rounds twice only where the f64 sum lands on the
 * midpoint between two f32 values, and the error then says which side the exact sum lies on.
 */
export function fmaF32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bv = s - p;
  const e = p - (s - bv) + (c - bv);
  const r = f32(s);
  if (e === 0 || r === s || !Number.isFinite(r)) return r;
  const other = s > r ? nextUp(r) : -nextUp(-r);
  if (Math.abs(s - r) !== Math.abs(other - s)) return r;
  // s is the midpoint of r and other: the exact sum is on e's side of it
  return e > 0 === other > r ? other : r;
}

function roundTiesToEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** x as Q8 blocks of 32: the quants, each block's scale d and d · (the sum of its quants), and d · (the sum of each
 * 16-value half's quants) as h. */
export interface Q8Row {
  q: Int8Array;
  d: Float32Array;
  e: Float32Array;
  h: Float32Array;
}

/** One row of x (a multiple of 32 values) as Q8 blocks. */
export function quantizeRowQ8(x: Float32Array): Q8Row {
  const q = new Int8Array(x.length);
  const d = new Float32Array(x.length / 32);
  const e = new Float32Array(x.length / 32);
  const h = new Float32Array(x.length / 16);
  for (let b = 0; b < d.length; b++) {
    const block = x.subarray(32 * b, 32 * b + 32);
    if (block.some((v) => !Number.isFinite(v))) {
      d[b] = e[b] = h[2 * b] = h[2 * b + 1] = Number.NaN;
      continue;
    }
    const scale = f32(block.reduce((m, v) => Math.max(m, Math.abs(v)), 0) / 127);
    d[b] = scale;
    if (scale === 0) continue;
    const sums = [0, 0];
    for (let i = 0; i < 32; i++) {
      q[32 * b + i] = roundTiesToEven(Math.min(Math.max(f32(block[i]! / scale), -127), 127));
      sums[i >> 4] += q[32 * b + i]!;
    }
    e[b] = f32(scale * (sums[0]! + sums[1]!));
    h[2 * b] = f32(scale * sums[0]!);
    h[2 * b + 1] = f32(scale * sums[1]!);
  }
  return { q, d, e, h };
}

/** ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), in f32. */
function laneTree(lanes: number[]): number {
  const [a0, a1, a2, a3, a4, a5, a6, a7] = lanes as [number, number, number, number, number, number, number, number];
  return f32(f32(f32(a0 + a4) + f32(a2 + a6)) + f32(f32(a1 + a5) + f32(a3 + a7)));
}

/** lane l += s_l · Σ_{j<4} w[4l + j] · q[4l + j] for one chunk of 32 (w, q from their offsets), rounded once. */
function addChunk(lanes: number[], s: (l: number) => number, w: (j: number) => number, x: Q8Row, b: number): void {
  for (let l = 0; l < 8; l++) {
    let sum = 0;
    for (let j = 4 * l; j < 4 * l + 4; j++) sum += w(j) * x.q[32 * b + j]!;
    lanes[l] = fmaF32(s(l), sum, lanes[l]!);
  }
}

/**
 * The 32-value blocks read as they are: Q8_0's bytes, Q4_0's nibbles − 8, Q4_1's nibbles and Q5_1's with their fifth
 * bits (d · q + m).
 */
const BLOCKS_32 = {
  q8_0: { bytes: 34, quant: (v: DataView, at: number, j: number) => v.getInt8(at + 2 + j), mins: false },
  q4_0: { bytes: 18, quant: (v: DataView, at: number, j: number) => nibble(v, at + 2, j) - 8, mins: false },
  q4_1: { bytes: 20, quant: (v: DataView, at: number, j: number) => nibble(v, at + 4, j), mins: true },
  q5_1: {
    bytes: 24,
    quant: (v: DataView, at: number, j: number) =>
      nibble(v, at + 8, j) | (((v.getUint32(at + 4, true) >>> j) & 1) << 4),
    mins: true,
  },
} as const;
export type Block32 = keyof typeof BLOCKS_32;
/** value j of 32 packed as 16 bytes at `at`: low nibbles first */
const nibble = (v: DataView, at: number, j: number) => (v.getUint8(at + (j & 15)) >> (j & 16 ? 4 : 0)) & 15;

/**
 * Output `o` of one row: x (as quantizeRowQ8 gives it) times row o of Q4_0, Q4_1, Q5_1 or Q8_0 weights (inDim
 * values a row). Q5_0 weights multiply as the Q8_0 blocks they widen to (widenQ5_0Here).
 */
export function q8Product(x: Q8Row, w: Uint8Array, inDim: number, o: number, dtype: Block32 = 'q8_0'): number {
  const blocks = inDim / 32;
  const { bytes, quant, mins } = BLOCKS_32[dtype];
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const lanes = new Array<number>(8).fill(0);
  const m = new Array<number>(8);
  for (let b = 0; b < blocks; b++) {
    const at = (o * blocks + b) * bytes;
    const s = f32(f16ToF32(view.getUint16(at, true)) * x.d[b]!);
    addChunk(
      lanes,
      () => s,
      (j) => quant(view, at, j),
      x,
      b,
    );
    if (!mins) continue;
    // after each 8 blocks (and the last, partial 8), lane l adds block l's min times its e
    m[b & 7] = f16ToF32(view.getUint16(at + 2, true));
    if ((b & 7) !== 7 && b !== blocks - 1) continue;
    for (let l = 0; l <= (b & 7); l++) lanes[l] = fmaF32(m[l]!, x.e[(b & ~7) + l]!, lanes[l]!);
  }
  return laneTree(lanes);
}

/**
 * A K-quant block of 256 values, read from ggml's layout (ggml-common.h) by value index: its integer quants, each
 * value's group scale d · sc and (Q2_K, Q4_K, Q5_K) each group's min dmin · m, all exact in f32.
 */
interface KBlock {
  quant(y: number): number;
  scale(y: number): number;
  min(group: number): number;
}

/** Q2_K: scales[16] (scale in the low nibble, min in the high one, a group of 16 each), qs[64], d, dmin. */
function q2kBlock(view: DataView, at: number): KBlock {
  const d = f16ToF32(view.getUint16(at + 80, true));
  const dmin = f16ToF32(view.getUint16(at + 82, true));
  return {
    // y = 128 n + 32 k + l: bits 2k of qs[32 n + l]
    quant: (y) => (view.getUint8(at + 16 + 32 * (y >> 7) + (y & 31)) >> (2 * ((y >> 5) & 3))) & 3,
    scale: (y) => f32(d * (view.getUint8(at + (y >> 4)) & 15)),
    min: (group) => f32(dmin * (view.getUint8(at + group) >> 4)),
  };
}

function q6kBlock(view: DataView, at: number): KBlock {
  const d = f16ToF32(view.getUint16(at + 208, true));
  return {
    // y = 128 n + 32 k + l: low nibble of ql[64 n + l + 32 (k odd)] (high nibble for k ≥ 2), bits 2k of qh[32 n + l]
    quant(y) {
      const n = y >> 7;
      const k = (y >> 5) & 3;
      const l = y & 31;
      const low = (view.getUint8(at + 64 * n + l + 32 * (k & 1)) >> (k >= 2 ? 4 : 0)) & 15;
      const high = (view.getUint8(at + 128 + 32 * n + l) >> (2 * k)) & 3;
      return (low | (high << 4)) - 32;
    },
    scale: (y) => f32(d * view.getInt8(at + 192 + (y >> 4))),
    min: () => 0,
  };
}

/** Q4_K's and Q5_K's block: d, dmin, then get_scale_min_k4's 6-bit scales and mins; its nibbles at qsAt. */
function q4kBlock(view: DataView, at: number, qsAt = 16): KBlock {
  const d = f16ToF32(view.getUint16(at, true));
  const dmin = f16ToF32(view.getUint16(at + 2, true));
  const q = (i: number) => view.getUint8(at + 4 + i);
  // sub-block j's 6-bit scale and min
  const sc = (j: number) => (j < 4 ? q(j) & 63 : (q(j + 4) & 15) | ((q(j - 4) >> 6) << 4));
  const m = (j: number) => (j < 4 ? q(j + 4) & 63 : (q(j + 4) >> 4) | ((q(j) >> 6) << 4));
  return {
    // y = 64 j + 32 h + l: the low (h = 0) or high nibble of qs[32 j + l]
    quant: (y) => (view.getUint8(at + qsAt + 32 * (y >> 6) + (y & 31)) >> (y & 32 ? 4 : 0)) & 15,
    scale: (y) => f32(d * sc(y >> 5)),
    min: (sub) => f32(dmin * m(sub)),
  };
}

/** Q5_K: Q4_K's fields, its nibbles after 32 bytes qh, plus 16 where bit (y >> 5) of qh[y mod 32] is set. */
function q5kBlock(view: DataView, at: number): KBlock {
  const low = q4kBlock(view, at, 48);
  return { ...low, quant: (y) => low.quant(y) + 16 * ((view.getUint8(at + 16 + (y & 31)) >> (y >> 5)) & 1) };
}

/** Q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, d. */
function q3kBlock(view: DataView, at: number): KBlock {
  const d = f16ToF32(view.getUint16(at + 108, true));
  const s = (i: number) => view.getUint8(at + 96 + i);
  // group j's scale: the low nibble of s[j] (j < 8) or the high one of s[j − 8], with bits 2 (j >> 2) of s[8 + j mod 4]
  // as its top two, minus 32
  const sc = (j: number) =>
    ((j < 8 ? s(j) & 15 : s(j - 8) >> 4) | (((s(8 + (j & 3)) >> (2 * (j >> 2))) & 3) << 4)) - 32;
  return {
    // y = 128 n + 32 k + l: bits 2k of qs[32 n + l], minus 4 unless bit 4n + k of hmask[l] is set
    quant(y) {
      const n = y >> 7;
      const k = (y >> 5) & 3;
      const l = y & 31;
      const low = (view.getUint8(at + 32 + 32 * n + l) >> (2 * k)) & 3;
      return low - ((view.getUint8(at + l) >> (4 * n + k)) & 1 ? 0 : 4);
    },
    scale: (y) => f32(d * sc(y >> 4)),
    min: () => 0,
  };
}

/** mins: how many values share a min (0: none) */
const K_QUANTS = {
  q2_k: { bytes: 84, read: q2kBlock, mins: 16 },
  q3_k: { bytes: 110, read: q3kBlock, mins: 0 },
  q4_k: { bytes: 144, read: q4kBlock, mins: 32 },
  q5_k: { bytes: 176, read: q5kBlock, mins: 32 },
  q6_k: { bytes: 210, read: q6kBlock, mins: 0 },
} as const;
export type KQuant = keyof typeof K_QUANTS;
export const isKQuant = (dtype: string): dtype is KQuant => dtype in K_QUANTS;

/** Output `o` of one row: x times row o of K-quant weights (inDim values a row, a multiple of 256). */
export function q8ProductK(x: Q8Row, w: Uint8Array, dtype: KQuant, inDim: number, o: number): number {
  const blocks = inDim / 256;
  const { bytes, read, mins } = K_QUANTS[dtype];
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const lanes = new Array<number>(8).fill(0);
  for (let kb = 0; kb < blocks; kb++) {
    const block = read(view, (o * blocks + kb) * bytes);
    for (let i = 0; i < 8; i++) {
      const b = 8 * kb + i;
      // lane l holds values 4l .. 4l + 3 of the chunk: its group's scale
      addChunk(
        lanes,
        (l) => f32(block.scale(32 * i + 4 * l) * x.d[b]!),
        (j) => block.quant(32 * i + j),
        x,
        b,
      );
    }
    // the mins, 8 groups at a time: lane l subtracts group g + l's min times x's scaled sum of those values
    const groups = mins === 0 ? 0 : 256 / mins;
    const sums = mins === 16 ? x.h : x.e;
    for (let g = 0; g < groups; g += 8)
      for (let l = 0; l < 8; l++) lanes[l] = fmaF32(-block.min(g + l), sums[groups * kb + g + l]!, lanes[l]!);
  }
  return laneTree(lanes);
}
