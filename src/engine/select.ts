/**
 * Ranking the tokens that top-k and top-p keep, without sorting (or partitioning) the whole vocabulary. Tokens rank by
 * logit, higher first, ties to the lower id — a strict total order — and either option keeps a prefix of that order:
 *
 *   1. the caller histograms the finite logits in RANK_BUCKETS buckets of distance below the maximum, in a pass it
 *      makes anyway (counts for top-k, weights for top-p), which tells which buckets hold the prefix's end;
 *   2. `collect` gathers those buckets' tokens, in id order, from the bucket numbers that pass kept (reading a small
 *      integer a token instead of working out its bucket again: ~0.6 → ~0.15 ms at 128,256 tokens), and `sortByRank`
 *      orders only them by a stable radix sort of their logits' bits (O(candidates)).
 *
 * A bucket number never decreases as a logit decreases, so the tokens of buckets 0..b are always a prefix of the
 * ranking: the buckets only decide how much is sorted, every result comes from the exact order. On synthetic logits
 * shaped like a language model's (bench/sampling.ts) with Llama 3's vocabulary (128,256), temperature 1.5 and
 * top_p 0.95, the nucleus held 42,000-50,000 tokens and the bucket of its cut 510-570; Sampler.sample took 5.8-6.2 ms
 * with the quickselect partitions this replaces and 4.9-5.2 ms with this (medians of 15, old and new in turn, a loaded
 * 2-core VM), of which ~2.5 ms were the exponentials the definition needs for every token (their total decides the
 * cut); 2.7-2.9 ms against 4.4-4.9 since those go through expNeg and `collect` reads stored bucket numbers.
 */

/** Buckets of the histogram: enough that the bucket holding a cut is small (~550 of 128,256 logits, see above). */
export const RANK_BUCKETS = 1024;

/** the bucket number of a token that cannot be drawn (-Infinity): in no range `collect` is asked for */
export const NO_BUCKET = RANK_BUCKETS;

/** Logits further below the maximum than this share the last bucket (weight ≤ e^-64/T: no mass a cut could need). */
const RANGE_MAX = 64;

const DIGIT_BITS = 11;
const DIGITS = 1 << DIGIT_BITS;

/** Work arrays of one vocabulary's size for ranking; part of SamplingScratch. */
export class RankScratch {
  /** tokens per bucket */
  readonly counts = new Uint32Array(RANK_BUCKETS);
  /** each token's bucket, as the caller's histogram pass found it (NO_BUCKET: -Infinity) */
  readonly buckets: Uint16Array;
  /** weight per bucket (summed in id order: an estimate, only used to choose the candidates) */
  readonly masses = new Float64Array(RANK_BUCKETS);
  /** the candidates, in id order */
  readonly byId: Int32Array;
  /** the candidates, in rank order */
  readonly byRank: Int32Array;
  readonly swapIds: Int32Array;
  /** sort keys, written as the logits (f32) and read as their bits */
  readonly keyFloats: Float32Array;
  readonly keys: Uint32Array;
  readonly swapKeys: Uint32Array;
  readonly digitCounts = new Uint32Array(DIGITS);

  constructor(vocabSize: number) {
    this.buckets = new Uint16Array(vocabSize);
    this.byId = new Int32Array(vocabSize);
    this.byRank = new Int32Array(vocabSize);
    this.swapIds = new Int32Array(vocabSize);
    this.keyFloats = new Float32Array(vocabSize);
    this.keys = new Uint32Array(this.keyFloats.buffer);
    this.swapKeys = new Uint32Array(vocabSize);
  }
}

/** Buckets per logit unit below `max`, spreading [min, max] (at most RANGE_MAX wide) over the buckets. */
export function bucketScale(max: number, min: number): number {
  const range = Math.min(max - min, RANGE_MAX);
  return range > 0 ? (RANK_BUCKETS - 1) / range : 0;
}

/** The bucket of finite logit `l` (0: the maximum's); never smaller for a smaller logit. */
export function bucketOf(l: number, max: number, scale: number): number {
  const d = (max - l) * scale;
  return d < RANK_BUCKETS - 1 ? Math.floor(d) : RANK_BUCKETS - 1;
}

/** Writes the tokens of buckets first..last among the first `count` of rank.buckets into rank.byId, in id order. */
export function collect(rank: RankScratch, count: number, first: number, last: number): number {
  const { buckets, byId } = rank;
  const span = last - first;
  let m = 0;
  for (let i = 0; i < count; i++) if ((buckets[i]! - first) >>> 0 <= span) byId[m++] = i;
  return m;
}

/**
 * Orders rank.byId[0, m) (ascending ids, finite logits) into rank.byRank[0, m): higher logit first, ties (-0 and +0
 * included) to the lower id, by a stable LSD radix sort of 11-bit digits of a key that orders as the logits do; a digit
 * that all keys share is skipped (the sign and exponent, often).
 */
export function sortByRank(logits: Float32Array, m: number, rank: RankScratch): void {
  const { byId, byRank, keyFloats } = rank;
  for (let j = 0; j < m; j++) keyFloats[j] = logits[byId[j]!]!;
  let keys = rank.keys;
  for (let j = 0; j < m; j++) {
    const bits = keys[j]!;
    // negative logits: larger bits rank lower already; the others reversed below them; -0 ranks as +0
    keys[j] = bits > 0x80000000 ? bits : 0x7fffffff - (bits & 0x7fffffff);
  }
  byRank.set(byId.subarray(0, m));
  let ids = byRank;
  let outIds = rank.swapIds;
  let outKeys = rank.swapKeys;
  for (let shift = 0; shift < 32; shift += DIGIT_BITS) {
    if (!scatterByDigit(keys, ids, m, shift, outKeys, outIds, rank.digitCounts)) continue;
    const sortedIds = outIds;
    outIds = ids;
    ids = sortedIds;
    const sortedKeys = outKeys;
    outKeys = keys;
    keys = sortedKeys;
  }
  if (ids !== byRank) byRank.set(ids.subarray(0, m));
}

/** One stable counting-sort pass on the digit at `shift`; false (nothing moved) when every key has the same digit. */
function scatterByDigit(
  keys: Uint32Array,
  ids: Int32Array,
  m: number,
  shift: number,
  outKeys: Uint32Array,
  outIds: Int32Array,
  counts: Uint32Array,
): boolean {
  counts.fill(0);
  for (let j = 0; j < m; j++) counts[(keys[j]! >>> shift) & (DIGITS - 1)]!++;
  if (counts[(keys[0]! >>> shift) & (DIGITS - 1)] === m) return false;
  let start = 0;
  for (let d = 0; d < DIGITS; d++) {
    const c = counts[d]!;
    counts[d] = start;
    start += c;
  }
  for (let j = 0; j < m; j++) {
    const key = keys[j]!;
    const at = counts[(key >>> shift) & (DIGITS - 1)]!++;
    outKeys[at] = key;
    outIds[at] = ids[j]!;
  }
  return true;
}
