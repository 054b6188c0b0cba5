/**
 * Token sampling: greedy, temperature, top-k, top-p, with a per-request seeded generator (same seed → same tokens).
 * Logprobs are always those of the model's distribution (log-softmax of the raw logits), whatever the sampling
 * settings, as OpenAI's API reports them.
 */
import { assert } from '../util/assert.js';
import { SeededRandom } from '../util/random.js';

export interface SamplingParams {
  /** 0 means greedy */
  temperature: number;
  /** 0 means no limit */
  topK: number;
  /** 1 means no limit */
  topP: number;
  seed: number;
}

export const GREEDY: SamplingParams = { temperature: 0, topK: 0, topP: 1, seed: 0 };

/** log-softmax of logits in f64, summed in index order (deterministic). */
export function logSoftmax(logits: Float32Array): Float64Array {
  let max = Number.NEGATIVE_INFINITY;
  for (const l of logits) if (l > max) max = l;
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - max);
  const logSum = max + Math.log(sum);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - logSum;
  return out;
}

/** Highest logit; ties go to the lowest token id. */
export function argmax(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
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

  sample(logits: Float32Array): number {
    const { temperature, topK, topP } = this.params;
    if (temperature === 0) return argmax(logits);
    // candidates by descending logit, ties by ascending id, so the order never depends on the sort's stability
    let ids = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
    if (topK > 0) ids = ids.slice(0, topK);
    const max = logits[ids[0]!]!;
    const weights = ids.map((id) => Math.exp((logits[id]! - max) / temperature));
    const total = weights.reduce((a, b) => a + b, 0);
    let kept = ids.length;
    if (topP < 1) {
      let cumulative = 0;
      for (let i = 0; i < ids.length; i++) {
        cumulative += weights[i]! / total;
        if (cumulative >= topP) {
          kept = i + 1;
          break;
        }
      }
    }
    const keptTotal = weights.slice(0, kept).reduce((a, b) => a + b, 0);
    let u = this.random.next() * keptTotal;
    for (let i = 0; i < kept; i++) {
      u -= weights[i]!;
      if (u < 0) return ids[i]!;
    }
    return ids[kept - 1]!;
  }
}
