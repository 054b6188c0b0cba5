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
 * a · b + c rounded once to f32, for f32 a and c and an integer b with |a · b| exact in f64 (b below 2^29). The sum
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

/** One row of x (a multiple of 32 values) as Q8 blocks: 32 int8 and a scale each. */
export function quantizeRowQ8(x: Float32Array): { q: Int8Array; d: Float32Array } {
  const q = new Int8Array(x.length);
  const d = new Float32Array(x.length / 32);
  for (let b = 0; b < d.length; b++) {
    const block = x.subarray(32 * b, 32 * b + 32);
    if (block.some((v) => !Number.isFinite(v))) {
      d[b] = Number.NaN;
      continue;
    }
    const scale = f32(block.reduce((m, v) => Math.max(m, Math.abs(v)), 0) / 127);
    d[b] = scale;
    if (scale === 0) continue;
    for (let i = 0; i < 32; i++) {
      q[32 * b + i] = roundTiesToEven(Math.min(Math.max(f32(block[i]! / scale), -127), 127));
    }
  }
  return { q, d };
}

/**
 * Output `o` of one row: x (as quantizeRowQ8 gives it) times row o of Q8_0 weights (inDim values a row). Q5_0
 * weights multiply as the Q8_0 blocks they widen to (widenQ5_0Here: the same integers and scales).
 */
export function q8Product(x: { q: Int8Array; d: Float32Array }, w: Uint8Array, inDim: number, o: number): number {
  const blocks = inDim / 32;
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const lanes = new Array<number>(8).fill(0);
  for (let b = 0; b < blocks; b++) {
    const at = (o * blocks + b) * 34;
    const s = f32(f16ToF32(view.getUint16(at, true)) * x.d[b]!);
    for (let l = 0; l < 8; l++) {
      let sum = 0;
      for (let j = 4 * l; j < 4 * l + 4; j++) sum += view.getInt8(at + 2 + j) * x.q[32 * b + j]!;
      lanes[l] = fmaF32(s, sum, lanes[l]!);
    }
  }
  const [a0, a1, a2, a3, a4, a5, a6, a7] = lanes as [number, number, number, number, number, number, number, number];
  return f32(f32(f32(a0 + a4) + f32(a2 + a6)) + f32(f32(a1 + a5) + f32(a3 + a7)));
}
