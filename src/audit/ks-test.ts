/**
 * The exact one-sided two-sample Kolmogorov–Smirnov test the timing scenario decides with (Gu et al., "Auditing
 * Prompt Caching in Language Model APIs", use the two-sample KS test between a hit and a miss procedure).
 *
 * With two samples of equal size n, the statistic D+ = max_t (F_fast(t) − F_slow(t)) takes values k/n, and under the
 * null hypothesis (both samples from one continuous distribution) its exact tail is (Gnedenko–Korolyuk)
 *
 *   P(D+ ≥ k/n) = C(2n, n−k) / C(2n, n) = ∏_{i=1..k} (n−k+i) / (n+i)
 *
 * so the p-value needs no approximation and no table: the smallest possible one is 1 / C(2n, n). Ties (equal
 * timings) only make the test conservative.
 */
import { SeededRandom } from '../util/random.js';

export interface KsResult {
  /** D+ = max_t (F_fast(t) − F_slow(t)), in [0, 1] */
  statistic: number;
  /** exact P(D+ ≥ statistic) under the null hypothesis */
  pValue: number;
}

/** Exact P(D+ ≥ k/n) for two samples of size n. */
export function ksTail(n: number, k: number): number {
  if (k <= 0) return 1;
  if (k > n) return 0;
  let p = 1;
  for (let i = 1; i <= k; i++) p *= (n - k + i) / (n + i);
  return p;
}

/** The smallest k such that P(D+ ≥ k/n) ≤ alpha (n + 1 when even k = n is not significant). */
export function ksCriticalCount(n: number, alpha: number): number {
  for (let k = 1; k <= n; k++) if (ksTail(n, k) <= alpha) return k;
  return n + 1;
}

/** One-sided test that `fast` is stochastically smaller (faster) than `slow`; the samples must have the same size. */
export function ksFaster(fast: readonly number[], slow: readonly number[]): KsResult {
  const n = fast.length;
  if (n === 0 || slow.length !== n) throw new RangeError('the KS test needs two non-empty samples of equal size');
  const k = ksCount(fast, slow);
  return { statistic: k / n, pValue: ksTail(n, k) };
}

/** n · D+: the largest lead of `fast`'s empirical CDF over `slow`'s (ties count against the lead). */
function ksCount(fast: readonly number[], slow: readonly number[]): number {
  const a = [...fast].sort((x, y) => x - y);
  const b = [...slow].sort((x, y) => x - y);
  let i = 0;
  let j = 0;
  let best = 0;
  while (i < a.length) {
    const t = a[i]!;
    while (i < a.length && a[i]! <= t) i++;
    while (j < b.length && b[j]! <= t) j++;
    best = Math.max(best, i - j);
  }
  return best;
}

/**
 * The smallest speed-up (ms) that the test detects with probability `power` at level `alpha`: bootstrap samples of
 * size n drawn from `reference` (the measured misses) against the same draws made faster by that much. Seeded:
 * the same measurements give the same answer. Returns Infinity when even n-way separation is not significant.
 */
export function detectableShift(
  reference: readonly number[],
  alpha: number,
  power: number,
  seed: number,
  repetitions = 200,
): number {
  const n = reference.length;
  if (ksCriticalCount(n, alpha) > n) return Number.POSITIVE_INFINITY;
  const sorted = [...reference].sort((x, y) => x - y);
  const powerAt = (shift: number): number => {
    const rng = new SeededRandom(seed);
    let rejected = 0;
    for (let r = 0; r < repetitions; r++) {
      const slow = Array.from({ length: n }, () => sorted[rng.nextInt(n)]!);
      const fast = Array.from({ length: n }, () => sorted[rng.nextInt(n)]! - shift);
      if (ksFaster(fast, slow).pValue <= alpha) rejected++;
    }
    return rejected / repetitions;
  };
  let lo = 0;
  let hi = Math.max(1e-3, sorted[n - 1]! - sorted[0]!) * 1.01; // beyond the range: every draw separates
  if (powerAt(hi) < power) return Number.POSITIVE_INFINITY;
  for (let step = 0; step < 30 && hi - lo > 0.01; step++) {
    const mid = (lo + hi) / 2;
    if (powerAt(mid) >= power) hi = mid;
    else lo = mid;
  }
  return hi;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
