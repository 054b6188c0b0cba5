/**
 * A prefill worker's engine: computes a request's prompt KV in chunks in its own pool and samples the first token with
 * the request's sampler, then hands the pages over (to be transferred) instead of decoding. No I/O and no timers, like
 * `Engine`: the worker calls `step(now)` and acts on the returned events.
 *
 *   waiting ──admitted (admission.ts; prompt pages at once)──▶ prefilling ──last chunk──▶ 'prefilled' (caller's pages)
 *
 * The same chunked forward pass as the colocated engine (chunk- and batch-invariant kernels), so the KV and the first
 * token are bit-identical to a colocated run of the same request. With a prefix cache (I9) the tenant's cached pages
 * of the prompt's head are read, not computed, and the prompt's pages are cached once computed; the handed-over table
 * holds the whole prompt either way, so what is transferred never depends on the cache.
 */
import type { ForwardInput, ForwardOutput, ForwardPass } from '../compute/forward.js';
import { KvIsolationError } from '../kv/isolation-error.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import type { PagePool } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import type { PrefixCache } from '../kv/prefix-cache.js';
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { checkFits, pickAdmissions, validateRequest } from './admission.js';
import { choiceRequest } from './choice-group.js';
import type { EngineConfig } from './engine-config.js';
import { grantPages, type PageGrant, poolRoom, releaseGrant } from './page-grant.js';
import { type PrefillPace, paceOf } from './prefill-pace.js';
import type { GeneratedToken, GenerationRequest, IsolationIncident } from './request.js';
import { SamplingScratch } from './sampler.js';
import { type Ahead, promptChunks, TOKEN_COST } from './scheduler.js';
import { type SamplingEnv, SequenceSampler, samplingEnv } from './sequence-sampler.js';
import { describeToken } from './token-logprobs.js';

/** A finished prefill: the table holds the prompt's KV; the caller transfers it, then calls `release` once. */
export interface Prefilled {
  request: GenerationRequest;
  table: PageTable;
  /** the first token of each choice (one unless the request asks for n > 1), drawn from the same logits */
  firsts: GeneratedToken[];
  release(): void;
}

export type PrefillEvent =
  | { kind: 'prefilled'; prefilled: Prefilled }
  | { kind: 'failed'; request: string; error: KvfenceError }
  | { kind: 'incident'; incident: IsolationIncident };

interface PrefillSequence {
  readonly request: GenerationRequest;
  /** the request's own samplers (penalties, stop tokens, grammar), one per choice: each draws its first token */
  readonly samplers: SequenceSampler[];
  readonly tenant: string;
  readonly pagesNeeded: number;
  readonly tenantPagesMax: number;
  readonly deadlineMs: number;
  grant: PageGrant | undefined;
}

export class PrefillEngine {
  private readonly waiting: PrefillSequence[] = [];
  private readonly running: PrefillSequence[] = [];
  private readonly pool: PagePool;
  private readonly sampling: SamplingEnv;
  private readonly scratch: SamplingScratch;
  /** steps of prompts alone sized to ALONE_FACTOR × promptStepMs (prefill-pace.ts); undefined: the step budget */
  private readonly pace: PrefillPace | undefined;
  /** how far ahead each tenant's prompts are of the others' (scheduler.ts fairShares) */
  private readonly ahead: Ahead = new Map();

  constructor(
    readonly config: EngineConfig,
    private readonly forward: ForwardPass,
    private readonly prefixCache: PrefixCache | undefined,
  ) {
    this.pool = forward.pool;
    this.sampling = samplingEnv(config.vocabSize, config.isStopToken, config.grammars);
    this.scratch = new SamplingScratch(config.vocabSize);
    assert(config.runningMax >= 1 && config.stepTokenBudget >= 1 && config.prefillChunkTokens >= 1, 'bounds');
    this.pace = paceOf(config, forward.keysOf);
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /**
   * Nothing to compute and no queued request admissible: the pages they wait for are held by finished requests whose
   * transfers run (their `release`), so stepping again before one is released would do nothing (StepLoop polls).
   */
  get stalled(): boolean {
    if (this.running.length > 0 || this.waiting.length === 0) return false;
    const room = poolRoom(this.pool, this.prefixCache, 0, this.config.runningMax, () => 0);
    return pickAdmissions(this.waiting, room).length === 0;
  }

  /** requests waiting for pages */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Queues a prompt, or throws a KvfenceError with nothing reserved (400 context, 503 full or never fits). */
  submit(request: GenerationRequest, nowMs: number): void {
    validateRequest(request, this.config); // I2 again, at the prefill worker (defence in depth)
    assert(this.find(request.id) === undefined, `request id ${request.id} is already prefilling`);
    // a 400 for options it cannot follow; choice i draws with seed + i, as the decode worker's samplers replay
    const samplers = Array.from(
      { length: request.choices ?? 1 },
      (_, c) => new SequenceSampler(choiceRequest(request, c), this.sampling),
    );
    const pagesNeeded = pagesForTokens(this.pool.layout, request.promptTokens.length);
    checkFits(pagesNeeded, this.pool.pageCount, request.tenantKvPagesMax, 'prefill');
    if (this.waiting.length >= this.config.waitingMax) {
      throw new KvfenceError('server_overloaded', `the prefill queue is full (${this.config.waitingMax} requests)`);
    }
    this.waiting.push({
      request,
      samplers,
      tenant: request.tenant,
      pagesNeeded,
      tenantPagesMax: request.tenantKvPagesMax,
      deadlineMs: nowMs + this.config.queueTimeoutMs,
      grant: undefined,
    });
  }

  /** Drops a request wherever it is; its pages are scrubbed and free before this returns. */
  cancel(requestId: string): boolean {
    const seq = this.find(requestId);
    if (seq === undefined) return false;
    this.remove(seq);
    return true;
  }

  step(nowMs: number): PrefillEvent[] {
    const events: PrefillEvent[] = [];
    for (const seq of this.waiting.filter((s) => nowMs >= s.deadlineMs)) {
      this.fail(
        seq,
        new KvfenceError('server_overloaded', 'no prefill KV pages became free in time; retry later'),
        events,
      );
    }
    this.admit();
    const planned = this.plan();
    if (planned.length === 0) return events;
    let outputs: ForwardOutput[];
    try {
      const started = performance.now();
      outputs = this.forward.run(planned.map((p) => p.input));
      const promptTokens = planned.reduce((n, p) => n + p.input.tokens.length, 0);
      const ms = performance.now() - started;
      this.pace?.record({ promptTokens, decoded: false, ms, attention: this.forward.lastAttention });
    } catch (error) {
      const message = errorMessage(error);
      for (const { seq } of planned)
        this.fail(seq, new KvfenceError('internal_error', `internal error in a prefill step: ${message}`), events);
      return events;
    }
    planned.forEach(({ seq }, i) => {
      const out = outputs[i]!;
      if (!out.ok) this.failForward(seq, out.error, nowMs, events);
      else if (seq.grant!.table.writtenTokens === seq.request.promptTokens.length)
        this.finish(seq, out.logits, nowMs, events);
    });
    return events;
  }

  /** Fails everything (shutdown). */
  abortAll(error: KvfenceError): PrefillEvent[] {
    const events: PrefillEvent[] = [];
    for (const seq of [...this.running, ...this.waiting]) this.fail(seq, error, events);
    return events;
  }

  private admit(): void {
    if (this.waiting.length === 0) return;
    const cache = this.prefixCache;
    const mine = (tenant: string) => this.running.filter((s) => s.tenant === tenant).length;
    const room = poolRoom(this.pool, cache, this.running.length, this.config.runningMax, mine);
    for (const seq of pickAdmissions(this.waiting, room)) {
      const owner = { tenant: seq.tenant, request: seq.request.id };
      seq.grant = grantPages(this.pool, cache, owner, seq.request.promptTokens, seq.pagesNeeded);
      this.waiting.splice(this.waiting.indexOf(seq), 1);
      this.running.push(seq);
    }
  }

  /** Prompt chunks under the step budget and the pace's, shared equally among tenants as in scheduler.ts. */
  private plan(): { seq: PrefillSequence; input: ForwardInput }[] {
    const { prefillChunkTokens, stepTokenBudget } = this.config;
    const cost = this.pace?.promptCost(false) ?? TOKEN_COST;
    return promptChunks(this.running, prefillChunkTokens, stepTokenBudget, cost, this.ahead, (seq) => ({
      tenant: seq.tenant,
      table: seq.grant!.table,
      tokens: seq.request.promptTokens,
    }));
  }

  /** The prompt is in the KV: cache its pages (I9), sample the first token, hand the pages over. */
  private finish(seq: PrefillSequence, logits: Float32Array, nowMs: number, events: PrefillEvent[]): void {
    const grant = seq.grant!;
    try {
      this.prefixCache?.publish(grant.table, grant.prefixKeys);
    } catch (error) {
      if (!(error instanceof KvIsolationError)) throw error;
      this.failForward(seq, error, nowMs, events);
      return;
    }
    const firsts: GeneratedToken[] = [];
    for (const sampler of seq.samplers) {
      const choice = sampler.choose(logits, this.scratch);
      if (choice.kind === 'failed') {
        this.fail(seq, choice.error, events);
        return;
      }
      // a stop token travels as a first token too: the decode worker's replay ends that choice with it
      firsts.push(describeToken(logits, choice.id, seq.request.topLogprobs, seq.request.logprobs !== false));
    }
    this.running.splice(this.running.indexOf(seq), 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      releaseGrant(this.pool, this.prefixCache, grant);
    };
    events.push({ kind: 'prefilled', prefilled: { request: seq.request, table: grant.table, firsts, release } });
  }

  private failForward(seq: PrefillSequence, error: KvfenceError, nowMs: number, events: PrefillEvent[]): void {
    if (!(error instanceof KvIsolationError)) {
      this.fail(seq, error, events);
      return;
    }
    const incident = { request: seq.request.id, tenant: seq.tenant, violation: error.violation, timeMs: nowMs };
    events.push({ kind: 'incident', incident });
    this.fail(seq, new KvfenceError('kv_isolation_violation', 'KV isolation check failed at prefill'), events);
  }

  private fail(seq: PrefillSequence, error: KvfenceError, events: PrefillEvent[]): void {
    this.remove(seq);
    events.push({ kind: 'failed', request: seq.request.id, error });
  }

  private remove(seq: PrefillSequence): void {
    const queue = seq.grant === undefined ? this.waiting : this.running;
    const index = queue.indexOf(seq);
    assert(index >= 0, `prefill sequence ${seq.request.id} is in its queue`);
    queue.splice(index, 1);
    if (seq.grant !== undefined) releaseGrant(this.pool, this.prefixCache, seq.grant);
    seq.grant = undefined;
  }

  private find(requestId: string): PrefillSequence | undefined {
    return this.running.find((s) => s.request.id === requestId) ?? this.waiting.find((s) => s.request.id === requestId);
  }
}
