/**
 * Token sampling: greedy, temperature, top-k, top-p, with a per-request seeded generator (same seed → same tokens).
 * A token's weight is e^((logit - max) / temperature), through expNeg (util/exp-neg.ts: ~3× Math.exp's speed).
 * Logprobs are always those of the model's distribution (log-softmax of the raw logits), whatever the sampling
 * settings, as OpenAI's API reports them.
 *
 * Every step is O(vocabulary): top-k and top-p find their set from a histogram and sort only the tokens of the buckets
 * that decide it (select.ts), never the vocabulary, and the draw walks the kept tokens in id order. (Before, the draw
 * walked tokens from most to least likely: the distribution is the same, the token a given seed picks is not — see
 * docs/serving.md.) Forbidden tokens (grammar masks, min_tokens, ignore_eos) arrive as -Infinity logits and are never
 * drawn. What is drawn is defined by the sort-all reference in sampler.test.ts, which a property test compares draw by
 * draw (ties, masks, top_p at a prefix's exact mass).
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { expNeg } from '../util/exp-neg.js';
import { SeededRandom } from '../util/random.js';
import { bucketOf, bucketScale, collect, NO_BUCKET, RANK_BUCKETS, RankScratch, sortByRank } from './select.js';

export interface SamplingParams {
  /** 0 means greedy */
  temperature: number;
  /** 0 means no limit */
  topK: number;
  /** 1 means no limit */
  topP: number;
  seed: number;
  /** OpenAI: subtracted from a token's logit once per time it occurs in the output so far */
  frequencyPenalty?: number;
  /** OpenAI: subtracted from a token's logit if it occurs in the output so far */
  presencePenalty?: number;
  /** vLLM: tokens of the prompt or output have positive logits divided by it, negative ones multiplied (1: off) */
  repetitionPenalty?: number;
  /** [token id, added logit] pairs */
  logitBias?: readonly (readonly [number, number])[];
  /** stop tokens cannot end the output before this many tokens */
  minTokens?: number;
  /** the model's end-of-generation tokens are never sampled (llama.cpp's ignore_eos) */
  ignoreEos?: boolean;
  /** more tokens that end the output (not part of it), as end-of-generation tokens do */
  stopTokenIds?: readonly number[];
}

export const GREEDY: SamplingParams = { temperature: 0, topK: 0, topP: 1, seed: 0 };

/** log-softmax of logits in f64, summed in index order (deterministic). */
export function logSoftmax(logits: Float32Array): Float64Array {
  const logSum = logSumExp(logits);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - logSum;
  return out;
}

/** log Σ exp(logits) in f64, summed in index order: logprob(i) = logits[i] - logSumExp(logits). */
export function logSumExp(logits: Float32Array): number {
  // indexed loops, not for-of: 2.6 → 1.7 ms for 128,256 logits (medians of 15 here), the same sums in the same order
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += expNeg(max - logits[i]!);
  return max + Math.log(sum);
}

/** Highest logit; ties go to the lowest token id. */
export function argmax(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
}

/**
 * Why these logits cannot be sampled from, if they cannot: a NaN or +Infinity (a model file whose weights or settings
 * overflow f32: the sampler's weights would be NaN, and greedy decoding would quietly take token 0), or every token
 * forbidden. A request meeting them fails with this; the sampler itself asserts they never reach it.
 */
export function unsampleable(logits: Float32Array): KvfenceError | undefined {
  let drawable = false;
  for (let i = 0; i < logits.length; i++) {
    const l = logits[i]!;
    if (Number.isNaN(l) || l === Number.POSITIVE_INFINITY)
      return new KvfenceError(
        'internal_error',
        `the model computed a logit of ${l} (token ${i}): its weights or settings overflow f32, so no token can be drawn`,
      );
    if (l !== Number.NEGATIVE_INFINITY) drawable = true;
  }
  return drawable ? undefined : new KvfenceError('internal_error', 'every token of the vocabulary is forbidden here');
}

/** Work arrays of one vocabulary's size, reused by every sequence of an engine (steps run one at a time). */
export class SamplingScratch {
  /** logits after penalties, bias and masks */
  readonly logits: Float32Array;
  readonly weights: Float64Array;
  readonly rank: RankScratch;
  /** one bit per token: a grammar's mask */
  readonly bits: Uint32Array;

  constructor(readonly vocabSize: number) {
    this.logits = new Float32Array(vocabSize);
    this.weights = new Float64Array(vocabSize);
    this.rank = new RankScratch(vocabSize);
    this.bits = new Uint32Array(Math.ceil(vocabSize / 32));
  }
}

export class Sampler {
  private readonly random: SeededRandom;

  constructor(readonly params: SamplingParams) {
    assert(
      params.temperature >= 0 && params.topK >= 0 && params.topP > 0 && params.topP <= 1,
      'sampling parameters out of range',
    );
    this.random = new SeededRandom(params.seed);
  }

  /**
   * Consumes the draw that `sample` would make, without logits: a decode worker continues a request whose first token
   * the prefill worker sampled with its own copy of this sampler, so both together draw exactly what one would.
   */
  skipDraw(): void {
    if (this.params.temperature !== 0) this.random.next();
  }

  /**
   * A token id; -Infinity logits are never chosen (at least one logit must be finite). With top-k or top-p: the kept
   * set is the shortest prefix of the ranking (logit, higher first, ties to the lower id) of the top-k tokens whose
   * weights, summed in rank order, reach top_p × their total (summed in id order); select.ts finds that prefix by
   * sorting only the tokens of the histogram buckets that can hold it.
   */
  sample(logits: Float32Array, scratch = new SamplingScratch(logits.length)): number {
    const { temperature, topK, topP } = this.params;
    if (temperature === 0) return argmax(logits);
    assert(scratch.vocabSize === logits.length, 'scratch arrays fit the vocabulary');
    if (topK === 0 && topP === 1) return this.sampleAll(logits, scratch.weights);
    let max = Number.NEGATIVE_INFINITY;
    let min = Number.POSITIVE_INFINITY;
    let n = 0;
    for (let i = 0; i < logits.length; i++) {
      const l = logits[i]!;
      if (l === Number.NEGATIVE_INFINITY) continue;
      if (l > max) max = l;
      if (l < min) min = l;
      n++;
    }
    assert(n > 0, 'some token may be sampled');
    if (topK > 0 && topK < n) return this.sampleTopK(logits, scratch, max, bucketScale(max, min));
    if (topP === 1) return this.sampleAll(logits, scratch.weights);
    return this.sampleTopP(logits, scratch, max, bucketScale(max, min), n);
  }

  /** top-k (and top-p within it): k exponentials; the k best sorted after a histogram of bucket counts. */
  private sampleTopK(logits: Float32Array, scratch: SamplingScratch, max: number, scale: number): number {
    const { rank, weights } = scratch;
    const { temperature, topK, topP } = this.params;
    const { counts, buckets } = rank;
    counts.fill(0);
    for (let i = 0; i < logits.length; i++) {
      const l = logits[i]!;
      const b = l === Number.NEGATIVE_INFINITY ? NO_BUCKET : bucketOf(l, max, scale);
      buckets[i] = b;
      if (b !== NO_BUCKET) counts[b]!++;
    }
    let last = 0;
    for (let seen = counts[0]!; seen < topK; ) seen += counts[++last]!;
    const m = collect(rank, logits.length, 0, last);
    sortByRank(logits, m, rank);
    const kthLogit = logits[rank.byRank[topK - 1]!]!;
    const kthId = rank.byRank[topK - 1]!;
    let total = 0;
    for (let j = 0; j < m; j++) {
      const id = rank.byId[j]!;
      const l = logits[id]!;
      if (l < kthLogit || (l === kthLogit && id > kthId)) continue;
      const w = expNeg((max - l) / temperature);
      weights[id] = w;
      total += w;
    }
    const count = topP < 1 ? massCut(weights, rank.byRank, topK, topP * total) || topK : topK;
    return this.drawAmong(logits, weights, rank.byRank[count - 1]!, rank.byId, m);
  }

  /**
   * top-p alone. Every finite token's weight is needed (their total decides the cut); the same pass sums them by
   * bucket, so the cut's bucket is known and only its tokens are sorted: the mass before them is the buckets' sum, in
   * another order than rank order, so it differs from the rank-order sum by at most a rounding bound (`slack`). A cut
   * that clears the bound on both sides is the exact one; one that does not (ties, a cut right at the boundary) is
   * found by sorting every token down to it instead. With 128,256 logits the nucleus was ~50,000 tokens and its
   * bucket ~550 (bench/sampling.ts).
   */
  private sampleTopP(logits: Float32Array, scratch: SamplingScratch, max: number, scale: number, n: number): number {
    const { rank, weights } = scratch;
    const { temperature, topP } = this.params;
    const { masses, buckets } = rank;
    masses.fill(0);
    let total = 0;
    for (let i = 0; i < logits.length; i++) {
      const l = logits[i]!;
      if (l === Number.NEGATIVE_INFINITY) {
        buckets[i] = NO_BUCKET;
        continue;
      }
      const w = expNeg((max - l) / temperature);
      weights[i] = w;
      total += w;
      const b = bucketOf(l, max, scale);
      buckets[i] = b;
      masses[b]! += w;
    }
    const need = topP * total;
    // |any-order sum - rank-order sum| ≤ 2·(terms + buckets)·2^-53·total; this is 4 times that
    const slack = total * (n + RANK_BUCKETS) * 2 ** -50;
    let bucket = 0;
    let before = 0;
    while (bucket < RANK_BUCKETS - 1 && before + masses[bucket]! < need) before += masses[bucket++]!;
    let m = collect(rank, logits.length, bucket, bucket);
    sortByRank(logits, m, rank);
    let sum = before;
    for (let j = 0; j < m; j++) {
      const id = rank.byRank[j]!;
      if (sum + weights[id]! < need) {
        sum += weights[id]!;
        continue;
      }
      if (sum < need - slack && sum + weights[id]! >= need + slack) return this.draw(logits, weights, id);
      break;
    }
    let last = 0;
    for (let mass = masses[0]!; mass < need + slack && last < RANK_BUCKETS - 1; ) mass += masses[++last]!;
    m = collect(rank, logits.length, 0, last);
    sortByRank(logits, m, rank);
    const count = massCut(weights, rank.byRank, m, need);
    assert(count > 0 || m === n, 'the candidates hold the cut');
    return this.drawAmong(logits, weights, rank.byRank[(count || m) - 1]!, rank.byId, m);
  }

  /** Every finite token kept: the same draw as the general path (same weights, same sums), in fewer passes. */
  private sampleAll(logits: Float32Array, weights: Float64Array): number {
    const { temperature } = this.params;
    const n = logits.length;
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < n; i++) if (logits[i]! > max) max = logits[i]!;
    assert(max !== Number.NEGATIVE_INFINITY, 'some token may be sampled');
    let total = 0;
    let last = -1;
    for (let i = 0; i < n; i++) {
      const l = logits[i]!;
      if (l === Number.NEGATIVE_INFINITY) {
        weights[i] = 0;
        continue;
      }
      const w = expNeg((max - l) / temperature);
      weights[i] = w;
      total += w;
      last = i;
    }
    let u = this.random.next() * total;
    for (let i = 0; i < n; i++) {
      if (logits[i] === Number.NEGATIVE_INFINITY) continue;
      u -= weights[i]!;
      if (u < 0) return i;
    }
    return last;
  }

  /**
   * Inverse CDF over the tokens that rank no lower than `lastKept` (a logit above its logit, or equal and an id no
   * higher), walked in id order, sums in f64 in the same order (deterministic). Each pass is split at `lastKept` so
   * that its test is one comparison (~20% less time: 0.65 → 0.52 ms a pass over 128,256 logits).
   */
  private draw(logits: Float32Array, weights: Float64Array, lastKept: number): number {
    const cut = logits[lastKept]!;
    let keptTotal = 0;
    for (let i = 0; i <= lastKept; i++) if (logits[i]! >= cut) keptTotal += weights[i]!;
    for (let i = lastKept + 1; i < logits.length; i++) if (logits[i]! > cut) keptTotal += weights[i]!;
    let u = this.random.next() * keptTotal;
    let last = -1;
    for (let i = 0; i < logits.length; i++) {
      if (i <= lastKept ? !(logits[i]! >= cut) : !(logits[i]! > cut)) continue;
      u -= weights[i]!;
      if (u < 0) return i;
      last = i;
    }
    return last;
  }

  /**
   * The same draw when ids[0, m) (ascending) hold every kept token among others: the top-k path's candidates, ~0.3 ms
   * less a token than two passes over 128,256 logits.
   */
  private drawAmong(logits: Float32Array, weights: Float64Array, lastKept: number, ids: Int32Array, m: number): number {
    const cut = logits[lastKept]!;
    const kept = (id: number) => logits[id]! > cut || (logits[id] === cut && id <= lastKept);
    let keptTotal = 0;
    for (let j = 0; j < m; j++) if (kept(ids[j]!)) keptTotal += weights[ids[j]!]!;
    let u = this.random.next() * keptTotal;
    let last = -1;
    for (let j = 0; j < m; j++) {
      const id = ids[j]!;
      if (!kept(id)) continue;
      u -= weights[id]!;
      if (u < 0) return id;
      last = id;
    }
    return last;
  }
}

/** The fewest of byRank[0, count) whose weights, summed in rank order, reach `need`; 0 when all of them fall short. */
function massCut(weights: Float64Array, byRank: Int32Array, count: number, need: number): number {
  let sum = 0;
  for (let j = 0; j < count; j++) {
    sum += weights[byRank[j]!]!;
    if (sum >= need) return j + 1;
  }
  return 0;
}
