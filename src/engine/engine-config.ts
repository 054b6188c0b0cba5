/** Scheduler bounds and tenant limits of an engine, validated once at startup. */
import type { GrammarCache } from '../structured/grammar-cache.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface EngineConfig {
  /** largest prompt + maxTokens accepted: the I1 proof's result */
  provenContext: number;
  vocabSize: number;
  /** sequences in the running batch at most */
  runningMax: number;
  /** requests waiting for admission at most; more get 503 */
  waitingMax: number;
  /** how long a request may wait for admission before it gets 503 */
  queueTimeoutMs: number;
  /** prompt tokens of one sequence per step at most */
  prefillChunkTokens: number;
  /** tokens (decode + prefill) of all sequences per step at most; at least runningMax so every decoder advances */
  stepTokenBudget: number;
  /**
   * a step's prompt tokens are sized to take about this long beside decoders (what other requests' prompts may add to
   * a decoder's inter-token time), ALONE_FACTOR times as long without them (prefill-pace.ts; absent: fixed chunks)
   */
  promptStepMs?: number;
  /** end-of-generation tokens: generation stops before emitting one */
  isStopToken: (id: number) => boolean;
  /** the vocabulary's compiled response formats (absent: requests with a response format are refused) */
  grammars?: GrammarCache;
}

export function validateEngineConfig(c: EngineConfig): void {
  const check = (name: string, value: number, min: number, max: number) => {
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new KvfenceError('invalid_argument', `${name} is ${value}; expected an integer from ${min} to ${max}`);
    }
  };
  check('the proven context', c.provenContext, 2, LIMITS.contextTokensMax);
  check('the running sequence maximum', c.runningMax, 1, LIMITS.runningSequencesMax);
  check('the waiting request maximum', c.waitingMax, 0, LIMITS.waitingRequestsMax);
  check('the queue timeout (ms)', c.queueTimeoutMs, 1, LIMITS.queueTimeoutMsMax);
  check('the prefill chunk', c.prefillChunkTokens, 1, LIMITS.stepTokensMax);
  check('the step token budget', c.stepTokenBudget, 1, LIMITS.stepTokensMax);
  if (c.promptStepMs !== undefined) check('the prompt time of a step (ms)', c.promptStepMs, 1, LIMITS.promptStepMsMax);
  if (c.stepTokenBudget < c.runningMax) {
    throw new KvfenceError(
      'invalid_argument',
      `the step token budget (${c.stepTokenBudget}) must be at least the running sequence maximum (${c.runningMax}), so every running sequence decodes each step`,
    );
  }
}
