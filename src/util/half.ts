/** IEEE half (f16) and bfloat16 conversions, bit-exact with ggml's reference conversions (round to nearest even). */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let h = mant >>> shift;
    if (rest > half || (rest === half && h & 1)) h += 1;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h += 1; // may carry into the exponent: that is correct rounding
  return sign | h;
}

export function bf16ToF32(b: number): number {
  u32[0] = b << 16;
  return f32[0]!;
}

export function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 64) & 0xffff; // quiet NaN, as ggml does
  return ((x + (0x7fff + ((x >>> 16) & 1))) >>> 16) & 0xffff;
}

let f16Values: Float32Array | undefined;

/** Every f16 bit pattern's value (65,536 entries, built on first use): a table read instead of f16ToF32's arithmetic. */
export function f16Table(): Float32Array {
  if (f16Values === undefined) f16Values = Float32Array.from({ length: 0x10000 }, (_, h) => f16ToF32(h));
  return f16Values;
}

/** Rounds a value through f16 and back (what an f16 KV cache or f16 storage keeps). */
export function roundToF16(value: number): number {
  return f16ToF32(f32ToF16(value));
}
