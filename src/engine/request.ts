/**
 * What goes into the engine (a tokenized, validated request) and what comes out of a step (events). Plain data: the
 * same shapes travel between processes when prefill and decode are split.
 */
import type { IsolationViolation } from '../kv/isolation-error.js';
import type { OutputConstraint } from '../structured/grammar-cache.js';
import type { KvfenceError } from '../util/errors.js';
import type { SamplingParams } from './sampler.js';

export interface GenerationRequest {
  /** made by the gateway, unique, never taken from a client */
  id: string;
  tenant: string;
  promptTokens: readonly number[];
  /** generated tokens at most; prompt + maxTokens must fit the proven context (I2) */
  maxTokens: number;
  sampling: SamplingParams;
  /** alternatives reported per generated token (0: only the chosen token's logprob) */
  topLogprobs: number;
  /**
   * false: the client did not ask for logprobs, so none are computed (a log Σ exp over the vocabulary per token: ~0.6
   * ms at 49k tokens) and tokens carry logprob 0 and no alternatives; absent: computed
   */
  logprobs?: boolean;
  /**
   * The tenant's KV page quota on a worker's pool, from the gateway's tenant table: it travels with each request so
   * every worker applies the limits the gateway holds (admission.ts), whatever the deployment.
   */
  tenantKvPagesMax: number;
  /** the output must be this document (response_format, or a forced tool call's arguments) */
  constraint?: OutputConstraint;
  /** `n`: answers drawn from one prompt, sharing its KV read-only (engine/choice-group.ts); absent means 1 */
  choices?: number;
}

export interface TokenLogprob {
  id: number;
  logprob: number;
}

export interface GeneratedToken {
  id: number;
  /**
   * log-probability of the chosen token under the model's distribution (f64 log-softmax of the logits); 0 when the
   * request said `logprobs: false`
   */
  logprob: number;
  /** the `topLogprobs` most likely tokens, most likely first, ties by lower id */
  top: TokenLogprob[];
}

export type FinishReason = 'stop' | 'length';

/** How one of a request's n choices ended. */
export interface ChoiceEnd {
  reason: FinishReason;
  completionTokens: number;
}

export type GenerationEnd =
  | {
      kind: 'finished';
      /** the last choice's reason (the only one's when n = 1) */
      reason: FinishReason;
      promptTokens: number;
      /** over all choices */
      completionTokens: number;
      /** with n > 1: each choice's ending, by index */
      choices?: ChoiceEnd[];
    }
  | { kind: 'failed'; error: KvfenceError };

/** An isolation check failed: everything an incident record needs (DESIGN I3). */
export interface IsolationIncident {
  request: string;
  tenant: string;
  violation: IsolationViolation;
  timeMs: number;
}

export type EngineEvent =
  /** `choice`: which of the request's n answers the token belongs to (0 when n = 1) */
  | { kind: 'token'; request: string; token: GeneratedToken; choice: number }
  | { kind: 'end'; request: string; end: GenerationEnd }
  | { kind: 'incident'; incident: IsolationIncident }
  /** a bug surfaced while running a batch; the batch's requests failed with internal_error */
  | { kind: 'bug'; error: Error };
