/**
 * What a request's options do to the logits before a token is drawn, in this order (docs/serving.md):
 *   1. logit_bias: added to the named tokens;
 *   2. repetition_penalty (vLLM): tokens of the prompt or the output so far have positive logits divided by it and
 *      negative logits multiplied by it;
 *   3. frequency_penalty × occurrences in the output + presence_penalty if it occurred (OpenAI), subtracted.
 * Each touches only the tokens it names or has seen: O(bias entries + distinct tokens), never the whole vocabulary.
 * Results are rounded to f32 like the logits themselves, so the same inputs give the same bits anywhere (I7).
 */
import type { SamplingParams } from './sampler.js';

export interface TokenHistory {
  /** distinct tokens of the prompt (only kept when a repetition penalty needs them) */
  readonly prompt: ReadonlySet<number>;
  /** occurrences of each token in the output so far */
  readonly output: ReadonlyMap<number, number>;
}

export function hasLogitProcessing(p: SamplingParams): boolean {
  return (
    (p.logitBias?.length ?? 0) > 0 ||
    (p.repetitionPenalty ?? 1) !== 1 ||
    (p.frequencyPenalty ?? 0) !== 0 ||
    (p.presencePenalty ?? 0) !== 0
  );
}

export function applyLogitProcessing(logits: Float32Array, p: SamplingParams, history: TokenHistory): void {
  for (const [id, bias] of p.logitBias ?? []) logits[id] = logits[id]! + bias;
  const repetition = p.repetitionPenalty ?? 1;
  if (repetition !== 1) {
    const penalize = (id: number) => {
      const l = logits[id]!;
      logits[id] = l > 0 ? l / repetition : l * repetition;
    };
    for (const id of history.output.keys()) penalize(id);
    for (const id of history.prompt) if (!history.output.has(id)) penalize(id);
  }
  const frequency = p.frequencyPenalty ?? 0;
  const presence = p.presencePenalty ?? 0;
  if (frequency !== 0 || presence !== 0) {
    for (const [id, count] of history.output) logits[id] = logits[id]! - (frequency * count + presence);
  }
}
