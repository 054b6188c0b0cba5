/**
 * e^-x for x ≥ 0, for the sampler's weights and log Σ exp: a token's weight is e^-((max - logit) / temperature), one
 * for every token of the vocabulary on every step that samples at a temperature or reports logprobs. V8's Math.exp
 * took ~17 ns a call here (2.1 ms a step at Llama 3's 128,256 tokens, on the engine thread every stream's step waits
 * on); this takes ~6 ns, within 2e-13 of it relative (what rounding x itself costs either way).
 *
 * 2^-y with y = x · 256 / ln 2 split into whole and fractional 1/256ths: 2^-(e >> 8) and 2^-((e & 255) / 256) from two
 * tables, the fraction left over (under 1/256 of a power of two, |r| < ln 2 / 256) by Taylor's series to its 6th term
 * (error r^6 / 720 < 6e-19). Plain double arithmetic (JavaScript fuses no multiply-add), so given its tables, which
 * V8's `**` builds at load, the same bits on every machine.
 */
const FINE_STEPS = 256;
/** 2^-(j / 256) */
const FINE = Float64Array.from({ length: FINE_STEPS }, (_, j) => 2 ** (-j / FINE_STEPS));
/** 2^-k down to the smallest subnormal, 2^-1074 */
const COARSE = Float64Array.from({ length: 1075 }, (_, k) => 2 ** -k);
const STEPS_PER_NAT = FINE_STEPS / Math.LN2;
/** past this many steps e^-x is below half the smallest subnormal: 0 */
const STEPS_MAX = 1075 * FINE_STEPS;
const NATS_PER_STEP = Math.LN2 / FINE_STEPS;

/** e^-x for x ≥ 0 (NaN, and x past ~745, give 0; below -ln 2 / 256 it reads outside its tables: NaN) */
export function expNeg(x: number): number {
  const y = x * STEPS_PER_NAT;
  if (!(y < STEPS_MAX)) return 0;
  const e = y | 0;
  const r = (e - y) * NATS_PER_STEP;
  const fraction = 1 + r * (1 + r * (1 / 2 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120)))));
  return COARSE[e >> 8]! * FINE[e & (FINE_STEPS - 1)]! * fraction;
}
