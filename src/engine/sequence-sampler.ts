/**
 * Everything that picks one request's next token, in one object per request (never shared): its seeded Sampler, its
 * token history for penalties, its stop tokens, and — with a response format — its GrammarMatcher. Built when the
 * request is accepted (a bad option or schema is a 400 then, nothing reserved), used once per generated token:
 *
 *   raw logits ─▶ bias, penalties ─▶ forbid stop tokens (min_tokens, ignore_eos) ─▶ grammar mask ─▶ draw ─▶ record
 *
 * With no option set the raw logits are drawn from directly (no copy). A decode worker replays the first token, which
 * the prefill worker drew with its own copy of this object, so both together behave as one (same draws, history and
 * grammar position): colocated and disaggregated runs of a request give the same tokens.
 */
import type { GrammarCache } from '../structured/grammar-cache.js';
import { GrammarMatcher } from '../structured/grammar-matcher.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { applyLogitProcessing, hasLogitProcessing } from './logits-processors.js';
import type { GenerationRequest } from './request.js';
import { Sampler, type SamplingScratch, unsampleable } from './sampler.js';

/** What samplers need from the model, built once per worker. */
export interface SamplingEnv {
  readonly vocabSize: number;
  readonly endOfGeneration: readonly number[];
  isEndOfGeneration(id: number): boolean;
  /** compiles response formats; without it a request that has one is refused */
  readonly grammars?: GrammarCache;
}

export function samplingEnv(
  vocabSize: number,
  isEndOfGeneration: (id: number) => boolean,
  grammars?: GrammarCache,
): SamplingEnv {
  const endOfGeneration: number[] = [];
  for (let id = 0; id < vocabSize; id++) if (isEndOfGeneration(id)) endOfGeneration.push(id);
  return { vocabSize, endOfGeneration, isEndOfGeneration, ...(grammars !== undefined ? { grammars } : {}) };
}

export type TokenChoice =
  /** `finished`: the token completed the response format's document; nothing may follow */
  | { kind: 'token'; id: number; finished: boolean }
  /** a stop token: the output ends here, without it */
  | { kind: 'stop'; id: number }
  | { kind: 'failed'; error: KvfenceError };

export class SequenceSampler {
  private readonly sampler: Sampler;
  private readonly matcher: GrammarMatcher | undefined;
  private readonly prompt: ReadonlySet<number>;
  private readonly output = new Map<number, number>();
  private readonly stopIds: ReadonlySet<number>;
  private readonly processing: boolean;
  /** tokens generated (recorded) so far */
  generated = 0;

  /** Throws a 400 KvfenceError for an option out of range or a response format that cannot be followed. */
  constructor(
    readonly request: GenerationRequest,
    private readonly env: SamplingEnv,
  ) {
    checkSampling(request, env);
    const p = request.sampling;
    this.sampler = new Sampler(p);
    this.prompt = (p.repetitionPenalty ?? 1) !== 1 ? new Set(request.promptTokens) : new Set();
    this.stopIds = new Set(p.stopTokenIds ?? []);
    this.processing = hasLogitProcessing(p);
    if (request.constraint !== undefined) {
      if (env.grammars === undefined)
        throw new KvfenceError('invalid_request_error', 'response formats are not available here', 'response_format');
      this.matcher = new GrammarMatcher(env.grammars.compile(request.constraint, request.tenant));
    }
  }

  /**
   * Picks the next token from the raw logits (which stay untouched: logprobs are reported from them). A refusal of this
   * request's own (a KvfenceError: a response format too ambiguous to follow at this point) fails it alone: thrown,
   * it stopped the engine's step, and every tenant's requests with it.
   */
  choose(logits: Float32Array, scratch: SamplingScratch): TokenChoice {
    return failedOn(() => this.chooseFrom(logits, scratch));
  }

  private chooseFrom(logits: Float32Array, scratch: SamplingScratch): TokenChoice {
    const p = this.request.sampling;
    const holdStops = this.generated < (p.minTokens ?? 0);
    if (!this.processing && this.matcher === undefined && !holdStops && p.ignoreEos !== true)
      return this.drawFrom(logits, scratch);
    const x = scratch.logits;
    x.set(logits);
    applyLogitProcessing(x, p, { prompt: this.prompt, output: this.output });
    const forbid = (id: number) => {
      x[id] = Number.NEGATIVE_INFINITY;
    };
    if (p.ignoreEos === true || holdStops) for (const id of this.env.endOfGeneration) forbid(id);
    if (holdStops) for (const id of this.stopIds) forbid(id);
    if (this.matcher !== undefined && !this.applyGrammar(x, scratch)) {
      return {
        kind: 'failed',
        error: new KvfenceError(
          'invalid_request_error',
          'no token of the vocabulary can continue the response format here (the model cannot write what it requires)',
          'response_format',
        ),
      };
    }
    return this.drawFrom(x, scratch);
  }

  /** The draw, or the request's failure when nothing can be drawn (a NaN from a broken model file, all forbidden). */
  private drawFrom(logits: Float32Array, scratch: SamplingScratch): TokenChoice {
    const error = unsampleable(logits);
    return error !== undefined ? { kind: 'failed', error } : this.record(this.sampler.sample(logits, scratch));
  }

  /** Takes a token drawn elsewhere by a copy of this sampler (the prefill worker's), checking it could be drawn here. */
  replay(id: number): TokenChoice {
    return failedOn(() => this.replayOf(id));
  }

  private replayOf(id: number): TokenChoice {
    this.sampler.skipDraw();
    const p = this.request.sampling;
    const bad = (why: string): TokenChoice => ({
      kind: 'failed',
      error: new KvfenceError('kv_transfer_failed', `the first token ${why}`),
    });
    if (!Number.isInteger(id) || id < 0 || id >= this.env.vocabSize) return bad('is outside the vocabulary');
    if (this.isStop(id)) {
      if (this.generated < (p.minTokens ?? 0)) return bad('is a stop token before min_tokens');
      if (this.matcher !== undefined && !this.matcher.complete) return bad('ends an unfinished document');
    }
    if (p.ignoreEos === true && this.env.isEndOfGeneration(id)) return bad('is end-of-generation under ignore_eos');
    return this.record(id);
  }

  /** Masks what the grammar forbids; stop tokens pass once the document may end. False when nothing is left. */
  private applyGrammar(x: Float32Array, scratch: SamplingScratch): boolean {
    const bits = scratch.bits;
    const complete = this.matcher!.fillMask(bits);
    if (complete) {
      for (const id of this.env.endOfGeneration) bits[id >>> 5]! |= 1 << (id & 31);
      for (const id of this.stopIds) bits[id >>> 5]! |= 1 << (id & 31);
    }
    let open = false;
    for (let w = 0; w < bits.length; w++) {
      const word = bits[w]!;
      const base = w * 32;
      if (word === 0xffffffff) {
        open = open || x.subarray(base, base + 32).some((l) => l !== Number.NEGATIVE_INFINITY);
        continue;
      }
      const end = Math.min(base + 32, x.length);
      for (let i = base; i < end; i++) {
        if (((word >>> (i - base)) & 1) === 0) x[i] = Number.NEGATIVE_INFINITY;
        else if (x[i] !== Number.NEGATIVE_INFINITY) open = true;
      }
    }
    return open;
  }

  private isStop(id: number): boolean {
    return (this.env.isEndOfGeneration(id) && this.request.sampling.ignoreEos !== true) || this.stopIds.has(id);
  }

  private record(id: number): TokenChoice {
    if (this.isStop(id)) return { kind: 'stop', id };
    if (this.matcher !== undefined && !this.matcher.accept(id)) {
      return {
        kind: 'failed',
        error: new KvfenceError('internal_error', 'the chosen token does not continue the response format'),
      };
    }
    this.output.set(id, (this.output.get(id) ?? 0) + 1);
    this.generated++;
    return { kind: 'token', id, finished: this.matcher?.finished ?? false };
  }
}

/** `pick`'s choice, or the request's failure when it throws one of its own (a KvfenceError); bugs go on up. */
function failedOn(pick: () => TokenChoice): TokenChoice {
  try {
    return pick();
  } catch (error) {
    if (error instanceof KvfenceError) return { kind: 'failed', error };
    throw error;
  }
}

/** Defence in depth: the gateway validated these already; a worker checks again what reaches it. */
function checkSampling(request: GenerationRequest, env: SamplingEnv): void {
  const p = request.sampling;
  const bad = (what: string, param: string) => new KvfenceError('invalid_request_error', what, param);
  const inVocab = (id: number) => Number.isInteger(id) && id >= 0 && id < env.vocabSize;
  const bias = p.logitBias ?? [];
  if (bias.length > LIMITS.logitBiasEntriesMax)
    throw bad(`at most ${LIMITS.logitBiasEntriesMax} entries`, 'logit_bias');
  for (const [id, value] of bias) {
    if (!inVocab(id)) throw bad(`token id ${id} is outside the vocabulary`, 'logit_bias');
    if (!(value >= -100 && value <= 100)) throw bad('biases must be from -100 to 100', 'logit_bias');
  }
  const stops = p.stopTokenIds ?? [];
  if (stops.length > LIMITS.stopTokenIdsMax || !stops.every(inVocab))
    throw bad(`at most ${LIMITS.stopTokenIdsMax} token ids of the vocabulary`, 'stop_token_ids');
  const within = (v: number | undefined, lo: number, hi: number) => v === undefined || (v >= lo && v <= hi);
  if (!within(p.frequencyPenalty, -2, 2)) throw bad('frequency_penalty must be from -2 to 2', 'frequency_penalty');
  if (!within(p.presencePenalty, -2, 2)) throw bad('presence_penalty must be from -2 to 2', 'presence_penalty');
  const rep = p.repetitionPenalty;
  if (rep !== undefined && !(rep > 0 && rep <= 10))
    throw bad('repetition_penalty must be in (0, 10]', 'repetition_penalty');
  const min = p.minTokens ?? 0;
  if (!Number.isInteger(min) || min < 0 || min > request.maxTokens)
    throw bad('min_tokens must be an integer from 0 to max_tokens', 'min_tokens');
}
