/**
 * Token sampling: greedy, temperature, top-k, top-p, with a per-request seeded generator (same seed → same tokens).
 * Logprobs are always those of the model's distribution (log-softmax of the raw logits), whatever the sampling
 * settings, as OpenAI's API reports them.
 *
 * Every step is O(vocabulary): top-k and top-p select their set by partitioning (select.ts), never by sorting the
 * vocabulary, and the draw walks the kept tokens in id order. (Before, the draw walked tokens from most to least
 * likely: the distribution is the same, the token a given seed picks is not — see docs/serving.md.) Forbidden tokens
 * (grammar masks, min_tokens, ignore_eos) arrive as -Infinity logits and are never drawn.
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { SeededRandom } from '../util/random.js';
import { selectTopK, selectTopMass } from './select.js';

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
  let max = Number.NEGATIVE_INFINITY;
  for (const l of logits) if (l > max) max = l;
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - max);
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
  readonly ids: Int32Array;
  readonly kept: Uint8Array;
  /** one bit per token: a grammar's mask */
  readonly bits: Uint32Array;

  constructor(readonly vocabSize: number) {
    this.logits = new Float32Array(vocabSize);
    this.weights = new Float64Array(vocabSize);
    this.ids = new Int32Array(vocabSize);
    this.kept = new Uint8Array(vocabSize);
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

  /** A token id; -Infinity logits are never chosen (at least one logit must be finite). */
  sample(logits: Float32Array, scratch = new SamplingScratch(logits.length)): number {
    const { temperature, topK, topP } = this.params;
    if (temperature === 0) return argmax(logits);
    assert(scratch.vocabSize === logits.length, 'scratch arrays fit the vocabulary');
    if (topK === 0 && topP === 1) return this.sampleAll(logits, scratch.weights);
    const { ids, weights, kept } = scratch;
    let max = Number.NEGATIVE_INFINITY;
    let n = 0;
    for (let i = 0; i < logits.length; i++) {
      const l = logits[i]!;
      if (l === Number.NEGATIVE_INFINITY) continue;
      if (l > max) max = l;
      ids[n++] = i;
    }
    assert(n > 0, 'some token may be sampled');
    if (topK > 0 && topK < n) {
      selectTopK(logits, ids, n, topK);
      n = topK;
    }
    let total = 0;
    for (let j = 0; j < n; j++) {
      const id = ids[j]!;
      const w = Math.exp((logits[id]! - max) / temperature);
      weights[id] = w;
      total += w;
    }
    if (topP < 1) n = Math.max(1, selectTopMass(logits, weights, ids, n, topP * total));
    kept.fill(0);
    for (let j = 0; j < n; j++) kept[ids[j]!] = 1;
    return this.draw(logits.length, weights, kept);
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
      const w = Math.exp((l - max) / temperature);
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

  /** Inverse CDF over the kept tokens in id order, sums in f64 in the same order (deterministic). */
  private draw(vocabSize: number, weights: Float64Array, kept: Uint8Array): number {
    let keptTotal = 0;
    let last = -1;
    for (let i = 0; i < vocabSize; i++) {
      if (kept[i] === 1) {
        keptTotal += weights[i]!;
        last = i;
      }
    }
    let u = this.random.next() * keptTotal;
    for (let i = 0; i < vocabSize; i++) {
      if (kept[i] !== 1) continue;
      u -= weights[i]!;
      if (u < 0) return i;
    }
    return last;
  }
}
