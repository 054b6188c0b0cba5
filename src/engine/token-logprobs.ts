/**
 * A generated token's logprob and its most likely alternatives, under the model's own distribution (raw logits,
 * before penalties, bias or masks — as OpenAI and vLLM report them). One pass for log Σ exp, one for the top
 * alternatives kept in a small ordered array: O(vocabulary × topCount), no sort of the vocabulary.
 */
import type { GeneratedToken, TokenLogprob } from './request.js';
import { logSumExp } from './sampler.js';

/** The chosen token's logprob and the `topCount` most likely tokens (ties: lower id first), unless not `wanted`. */
export function describeToken(logits: Float32Array, id: number, topCount: number, wanted = true): GeneratedToken {
  if (!wanted) return { id, logprob: 0, top: [] };
  const logSum = logSumExp(logits);
  const top: TokenLogprob[] = [];
  if (topCount > 0) {
    for (let t = 0; t < logits.length; t++) {
      const logprob = logits[t]! - logSum;
      if (top.length === topCount && !(logprob > top[top.length - 1]!.logprob)) continue;
      // ids come in ascending order, so a tie never displaces an earlier (lower) id
      let at = top.length;
      while (at > 0 && logprob > top[at - 1]!.logprob) at--;
      top.splice(at, 0, { id: t, logprob });
      if (top.length > topCount) top.pop();
    }
  }
  return { id, logprob: logits[id]! - logSum, top };
}
