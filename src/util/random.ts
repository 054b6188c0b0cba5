/**
 * A small seeded PRNG (xoshiro128**, seeded through splitmix32) so that test models and sampling are reproducible
 * across runs and machines. Not for anything secret: nonces use node:crypto.
 */
export class SeededRandom {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spareNormal: number | undefined;

  constructor(seed: number) {
    let x = seed >>> 0;
    const splitmix = () => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = splitmix();
    this.s1 = splitmix();
    this.s2 = splitmix();
    this.s3 = splitmix();
  }

  /** uniform u32 */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.s1 << 9) >>> 0;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** uniform in [0, 1) with 32 bits of resolution */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /** uniform integer in [0, n) */
  nextInt(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** standard normal (Box–Muller) */
  normal(): number {
    if (this.spareNormal !== undefined) {
      const v = this.spareNormal;
      this.spareNormal = undefined;
      return v;
    }
    const u = 1 - this.next(); // (0, 1]
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
