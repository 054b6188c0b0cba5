/**
 * The serving engine: queues, the running batch and one `step()` at a time (expire → admit → plan → forward → sample →
 * release). No I/O and no timers: time comes in as an argument, results go out as returned events, so the same engine
 * runs under the colocated worker, a decode worker, or a test calling step() in a loop.
 */
import type { ForwardOutput, ForwardPass } from '../compute/forward.js';
import { KvIsolationError } from '../kv/isolation-error.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import type { PrefixCache } from '../kv/prefix-cache.js';
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { checkFits, pickAdmissions, validateRequest } from './admission.js';
import { type EngineConfig, validateEngineConfig } from './engine-config.js';
import { grantPages, poolRoom } from './page-grant.js';
import type { EngineEvent, GenerationRequest } from './request.js';
import { SamplingScratch } from './sampler.js';
import { planStep } from './scheduler.js';
import { Sequence } from './sequence.js';
import { type SamplingEnv, SequenceSampler, samplingEnv } from './sequence-sampler.js';
import { describeToken } from './token-logprobs.js';

export interface EngineStats {
  running: number;
  waiting: number;
  pagesTotal: number;
  pagesFree: number;
  /** pages the prefix cache holds (absent without one) */
  pagesCached?: number;
  /** pages read from the prefix cache instead of computed, since start (absent without one) */
  pagesReused?: number;
  /** per tenant: waiting + running requests, and pages held */
  tenants: Map<string, { requests: number; pages: number }>;
}

export interface EngineOptions {
  /** the tenant-scoped prefix cache over the forward pass's pool (none: every prompt is computed in full) */
  prefixCache?: PrefixCache;
}

/** What a decode worker hands the engine once a transfer committed (see `Engine.adoptTransferred`). */
export interface TransferredSequence {
  request: GenerationRequest;
  table: PageTable;
  /** the transferred prompt pages */
  reservation: PageReservation;
  /** the pages for generated tokens (none when the prompt's last page holds them all) */
  extraReservation: PageReservation;
  /** the first generated token, sampled by the prefill worker */
  first: number;
  /** the request's sampler, with the first token already replayed into it (`Engine.samplerFor`, then `replay`) */
  sampler: SequenceSampler;
}

export class Engine {
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private readonly tenantRequests = new Map<string, number>();
  protected readonly pool: PagePool;
  private readonly prefixCache: PrefixCache | undefined;
  private readonly sampling: SamplingEnv;
  private readonly scratch: SamplingScratch;

  constructor(
    readonly config: EngineConfig,
    private readonly forward: ForwardPass,
    options: EngineOptions = {},
  ) {
    validateEngineConfig(config);
    this.pool = forward.pool;
    this.prefixCache = options.prefixCache;
    this.sampling = samplingEnv(config.vocabSize, config.isStopToken, config.grammars);
    this.scratch = new SamplingScratch(config.vocabSize);
    // I1 again where the pages are: the largest accepted request fits the pool.
    assert(
      pagesForTokens(this.pool.layout, config.provenContext) <= this.pool.pageCount,
      'the proven context fits the pool',
    );
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** Queues a request or throws a KvfenceError (400 invalid or over the context, 503 queue full): nothing reserved then. */
  submit(request: GenerationRequest, nowMs: number): void {
    validateRequest(request, this.config); // defence in depth (I2): the gateway checked this already
    assert(!this.find(request.id), `request id ${request.id} is already in use`);
    const sampler = this.samplerFor(request);
    const pagesNeeded = pagesForTokens(this.pool.layout, request.promptTokens.length + request.maxTokens);
    checkFits(pagesNeeded, this.pool.pageCount, request.tenantKvPagesMax, 'KV');
    if (this.waiting.length >= this.config.waitingMax) {
      throw new KvfenceError(
        'server_overloaded',
        `the waiting queue is full (${this.config.waitingMax} requests); retry later`,
      );
    }
    this.waiting.push(new Sequence(request, pagesNeeded, nowMs + this.config.queueTimeoutMs, sampler));
    this.countRequest(request.tenant, +1);
  }

  /**
   * A decode worker's entry point: a request whose prompt KV arrived by a verified transfer (I5) and whose first token
   * the prefill worker sampled joins the running batch as decoding, with `first` as its next input. `table` holds every
   * page of the request (prompt + maxTokens), its prompt written; the two reservations are released when it ends.
   * Throws (nothing taken over) when the batch is full; the caller releases the pages then.
   */
  adoptTransferred(adoption: TransferredSequence, nowMs: number): void {
    const { request, table, reservation, extraReservation, first, sampler } = adoption;
    const need = pagesForTokens(this.pool.layout, request.promptTokens.length + request.maxTokens);
    assert(!this.find(request.id), `request id ${request.id} is already in use`);
    assert(table.writtenTokens === request.promptTokens.length, 'the transferred table holds exactly the prompt');
    assert(table.pages.length === need, 'the transferred table holds every page the request needs');
    assert(
      request.maxTokens > 1 && sampler.generated === 1 && sampler.request === request,
      'a request that ends at its first token is not adopted; its sampler has replayed the first token',
    );
    if (this.running.length >= this.config.runningMax) {
      throw new KvfenceError('server_overloaded', `the running batch is full (${this.config.runningMax} sequences)`);
    }
    const seq = new Sequence(request, need, nowMs, sampler);
    seq.reservation = reservation;
    seq.extraReservation = extraReservation;
    seq.table = table;
    seq.nextInput = first;
    seq.generatedCount = 1;
    seq.state = 'decoding';
    this.running.push(seq);
    this.countRequest(request.tenant, +1);
  }

  /** A request's token picker; throws a 400 KvfenceError for an option or response format it cannot follow. */
  samplerFor(request: GenerationRequest): SequenceSampler {
    return new SequenceSampler(request, this.sampling);
  }

  /** Drops a request wherever it is; its pages are scrubbed and free before this returns. False when unknown/ended. */
  cancel(requestId: string): boolean {
    const seq = this.find(requestId);
    if (seq === undefined) return false;
    this.remove(seq);
    return true;
  }

  /** One scheduling step. Returns what happened; never throws for a request's failure. */
  step(nowMs: number): EngineEvent[] {
    const events: EngineEvent[] = [];
    this.expireWaiting(nowMs, events);
    this.admit();
    const planned = planStep(this.config, this.running);
    if (planned.length === 0) return events;
    let outputs: ForwardOutput[];
    try {
      outputs = this.forward.run(planned.map((p) => p.input));
    } catch (error) {
      // A bug in the batch (not a request's fault): fail its requests honestly (I6) and free their pages (I8).
      const bug = error instanceof Error ? error : new Error(errorMessage(error));
      events.push({ kind: 'bug', error: bug });
      for (const { seq } of planned)
        this.fail(seq, new KvfenceError('internal_error', 'internal error while running the model'), events);
      return events;
    }
    planned.forEach(({ seq }, i) => {
      const out = outputs[i]!;
      if (!out.ok) this.failForward(seq, out.error, nowMs, events);
      else if (seq.state === 'prefilling' && seq.table!.writtenTokens < seq.request.promptTokens.length) return;
      else if (seq.state === 'decoding' || this.publishPrefix(seq, nowMs, events))
        this.sampleNext(seq, out.logits, events);
    });
    return events;
  }

  /** Fails every request (shutdown); each gets its end event and its pages back. */
  abortAll(error: KvfenceError): EngineEvent[] {
    const events: EngineEvent[] = [];
    for (const seq of [...this.running, ...this.waiting]) this.fail(seq, error, events);
    return events;
  }

  stats(): EngineStats {
    const tenants = new Map<string, { requests: number; pages: number }>();
    for (const [tenant, requests] of this.tenantRequests)
      tenants.set(tenant, { requests, pages: this.pool.pagesOfTenant(tenant) });
    return {
      running: this.running.length,
      waiting: this.waiting.length,
      pagesTotal: this.pool.pageCount,
      pagesFree: this.pool.freePageCount,
      ...(this.prefixCache !== undefined ? this.prefixCache.stats() : {}),
      tenants,
    };
  }

  /** Ids of a tenant's running requests, oldest first. */
  runningRequestsOf(tenant: string): string[] {
    return this.running.filter((s) => s.tenant === tenant).map((s) => s.id);
  }

  /** The page table a running request reads through (tests provoke isolation failures with it). */
  runningTable(requestId: string): PageTable | undefined {
    return this.running.find((s) => s.id === requestId)?.table;
  }

  private admit(): void {
    if (this.waiting.length === 0) return; // the cache's evictable count below walks its entries
    const cache = this.prefixCache;
    const room = poolRoom(this.pool, cache, this.running.length, this.config.runningMax);
    for (const seq of pickAdmissions(this.waiting, room)) {
      const owner = { tenant: seq.tenant, request: seq.id };
      const grant = grantPages(this.pool, cache, owner, seq.request.promptTokens, seq.pagesNeeded);
      seq.reservation = grant.reservation;
      seq.table = grant.table;
      seq.prefixKeys = grant.prefixKeys;
      seq.prefixHits = grant.prefixHits;
      seq.state = 'prefilling';
      this.waiting.splice(this.waiting.indexOf(seq), 1);
      this.running.push(seq);
    }
  }

  private expireWaiting(nowMs: number, events: EngineEvent[]): void {
    for (const seq of this.waiting.filter((s) => nowMs >= s.admitDeadlineMs)) {
      const waited = nowMs - (seq.admitDeadlineMs - this.config.queueTimeoutMs);
      this.fail(
        seq,
        new KvfenceError('server_overloaded', `no KV pages or batch slot became free within ${waited} ms; retry later`),
        events,
      );
    }
  }

  private sampleNext(seq: Sequence, logits: Float32Array, events: EngineEvent[]): void {
    const choice = seq.sampler.choose(logits, this.scratch);
    if (choice.kind === 'failed') {
      this.fail(seq, choice.error, events);
      return;
    }
    if (choice.kind === 'stop') {
      this.finish(seq, 'stop', events);
      return;
    }
    const { id } = choice;
    events.push({ kind: 'token', request: seq.id, token: describeToken(logits, id, seq.request.topLogprobs) });
    seq.generatedCount++;
    if (choice.finished) {
      this.finish(seq, 'stop', events); // the response format's document is complete
      return;
    }
    if (seq.generatedCount >= seq.request.maxTokens) {
      this.finish(seq, 'length', events);
      return;
    }
    seq.nextInput = id;
    seq.state = 'decoding';
  }

  /** Caches the prompt's pages once they are computed; false (the request failed) when a page fails its I3 check. */
  private publishPrefix(seq: Sequence, nowMs: number, events: EngineEvent[]): boolean {
    if (this.prefixCache === undefined) return true;
    try {
      this.prefixCache.publish(seq.table!, seq.prefixKeys);
      return true;
    } catch (error) {
      if (!(error instanceof KvIsolationError)) throw error;
      this.failForward(seq, error, nowMs, events);
      return false;
    }
  }

  private failForward(seq: Sequence, error: KvfenceError, nowMs: number, events: EngineEvent[]): void {
    if (!(error instanceof KvIsolationError)) {
      this.fail(seq, error, events);
      return;
    }
    events.push({
      kind: 'incident',
      incident: { request: seq.id, tenant: seq.tenant, violation: error.violation, timeMs: nowMs },
    });
    // The client learns that its request was aborted, never whose page it touched.
    this.fail(
      seq,
      new KvfenceError(
        'kv_isolation_violation',
        'KV isolation check failed: the request was aborted and an incident was recorded',
      ),
      events,
    );
  }

  protected finish(seq: Sequence, reason: 'stop' | 'length', events: EngineEvent[]): void {
    this.remove(seq);
    const end = {
      kind: 'finished' as const,
      reason,
      promptTokens: seq.request.promptTokens.length,
      completionTokens: seq.generatedCount,
    };
    events.push({ kind: 'end', request: seq.id, end });
  }

  /** A request's one failed ending (I6). Protected, with `finish` and `find`, for the mutation self-test. */
  protected fail(seq: Sequence, error: KvfenceError, events: EngineEvent[]): void {
    this.remove(seq);
    events.push({ kind: 'end', request: seq.id, end: { kind: 'failed', error } });
  }

  /** Takes a sequence out of the queues and gives its pages back (scrubbed) and its tenant's slot. */
  private remove(seq: Sequence): void {
    const queue = seq.state === 'waiting' ? this.waiting : this.running;
    const index = queue.indexOf(seq);
    assert(index >= 0, `sequence ${seq.id} is in its queue`);
    queue.splice(index, 1);
    if (seq.reservation !== undefined) this.pool.release(seq.reservation);
    if (seq.extraReservation !== undefined) this.pool.release(seq.extraReservation);
    this.prefixCache?.detach(seq.prefixHits);
    seq.prefixHits = [];
    seq.table = undefined;
    this.countRequest(seq.tenant, -1);
  }

  /** Requests per tenant, for stats: asserted where it changes, so a lost count shows at once. */
  private countRequest(tenant: string, delta: 1 | -1): void {
    const count = (this.tenantRequests.get(tenant) ?? 0) + delta;
    assert(count >= 0, 'tenant request counts stay non-negative');
    if (count === 0) this.tenantRequests.delete(tenant);
    else this.tenantRequests.set(tenant, count);
    assert(this.tenantRequests.size <= this.waiting.length + this.running.length, 'every counted tenant has a request');
  }

  protected find(requestId: string): Sequence | undefined {
    return this.running.find((s) => s.id === requestId) ?? this.waiting.find((s) => s.id === requestId);
  }
}
