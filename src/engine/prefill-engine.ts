/**
 * A prefill worker's engine: computes a request's prompt KV in chunks in its own pool and samples the first token with
 * the request's sampler, then hands the pages over (to be transferred) instead of decoding. No I/O and no timers, like
 * `Engine`: the worker calls `step(now)` and acts on the returned events.
 *
 *   waiting ──admit (all prompt pages at once)──▶ prefilling ──last chunk──▶ event 'prefilled' (pages now the caller's)
 *
 * The same chunked forward pass as the colocated engine (chunk- and batch-invariant kernels), so the KV and the first
 * token are bit-identical to a colocated run of the same request.
 */
import type { ForwardOutput, ForwardPass } from '../compute/forward.js';
import { KvIsolationError } from '../kv/isolation-error.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { describeToken } from './engine.js';
import type { GeneratedToken, GenerationRequest, IsolationIncident } from './request.js';
import { Sampler } from './sampler.js';

export interface PrefillEngineConfig {
  /** largest prompt + maxTokens accepted (I2 re-check); the worker's I1 proof */
  provenContext: number;
  vocabSize: number;
  /** requests prefilling at once at most */
  runningMax: number;
  /** requests waiting for pages at most; more get 503 */
  waitingMax: number;
  /** longest wait for pages (503 after) */
  queueTimeoutMs: number;
  prefillChunkTokens: number;
  stepTokenBudget: number;
}

/** A finished prefill: the pages hold the prompt's KV; the caller transfers them and then releases `reservation`. */
export interface Prefilled {
  request: GenerationRequest;
  table: PageTable;
  reservation: PageReservation;
  first: GeneratedToken;
}

export type PrefillEvent =
  | { kind: 'prefilled'; prefilled: Prefilled }
  | { kind: 'failed'; request: string; error: KvfenceError }
  | { kind: 'incident'; incident: IsolationIncident };

interface PrefillSequence {
  request: GenerationRequest;
  pagesNeeded: number;
  deadlineMs: number;
  reservation: PageReservation | undefined;
  table: PageTable | undefined;
}

export class PrefillEngine {
  private readonly waiting: PrefillSequence[] = [];
  private readonly running: PrefillSequence[] = [];
  private readonly pool: PagePool;

  constructor(
    readonly config: PrefillEngineConfig,
    private readonly forward: ForwardPass,
  ) {
    this.pool = forward.pool;
    assert(config.runningMax >= 1 && config.stepTokenBudget >= 1 && config.prefillChunkTokens >= 1, 'bounds');
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** requests waiting for pages */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Queues a prompt, or throws a KvfenceError with nothing reserved (400 context, 503 full or never fits). */
  submit(request: GenerationRequest, nowMs: number): void {
    const { promptTokens, maxTokens } = request;
    if (promptTokens.length === 0) throw new KvfenceError('invalid_request_error', 'the prompt is empty', 'prompt');
    // I2 again, at the prefill worker (defence in depth): the same 400 the gateway gives.
    if (!Number.isInteger(maxTokens) || maxTokens < 1 || promptTokens.length + maxTokens > this.config.provenContext) {
      throw new KvfenceError(
        'context_length_exceeded',
        `prompt (${promptTokens.length} tokens) + max tokens (${maxTokens}) exceeds the prefill worker's proven context of ${this.config.provenContext} tokens`,
        'messages',
      );
    }
    for (const id of promptTokens) {
      if (!Number.isInteger(id) || id < 0 || id >= this.config.vocabSize) {
        throw new KvfenceError('invalid_request_error', `token id ${id} is outside the vocabulary`, 'prompt');
      }
    }
    assert(this.find(request.id) === undefined, `request id ${request.id} is already prefilling`);
    const pagesNeeded = pagesForTokens(this.pool.layout, promptTokens.length);
    if (pagesNeeded > this.pool.pageCount) {
      // Only reachable when the I1 proof was bypassed (a test build): fail loudly, never truncate.
      throw new KvfenceError(
        'kv_capacity_exceeded',
        `the prompt needs ${pagesNeeded} KV pages but the prefill pool has only ${this.pool.pageCount}`,
      );
    }
    if (this.waiting.length >= this.config.waitingMax) {
      throw new KvfenceError('server_overloaded', `the prefill queue is full (${this.config.waitingMax} requests)`);
    }
    this.waiting.push({
      request,
      pagesNeeded,
      deadlineMs: nowMs + this.config.queueTimeoutMs,
      reservation: undefined,
      table: undefined,
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
      outputs = this.forward.run(planned.map((p) => p.input));
    } catch (error) {
      const message = errorMessage(error);
      for (const { seq } of planned)
        this.fail(seq, new KvfenceError('internal_error', `internal error in a prefill step: ${message}`), events);
      return events;
    }
    planned.forEach(({ seq }, i) => {
      const out = outputs[i]!;
      if (!out.ok) {
        if (out.error instanceof KvIsolationError) {
          const incident = { request: seq.request.id, tenant: seq.request.tenant, violation: out.error.violation };
          events.push({ kind: 'incident', incident: { ...incident, timeMs: nowMs } });
          this.fail(seq, new KvfenceError('kv_isolation_violation', 'KV isolation check failed at prefill'), events);
        } else {
          this.fail(seq, out.error, events);
        }
        return;
      }
      if (seq.table!.writtenTokens < seq.request.promptTokens.length) return;
      const id = new Sampler(seq.request.sampling).sample(out.logits);
      const first = describeToken(out.logits, id, seq.request.topLogprobs);
      this.running.splice(this.running.indexOf(seq), 1);
      events.push({
        kind: 'prefilled',
        prefilled: { request: seq.request, table: seq.table!, reservation: seq.reservation!, first },
      });
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
    let free = this.pool.freePageCount;
    while (this.waiting.length > 0 && this.running.length < this.config.runningMax) {
      const seq = this.waiting[0]!;
      if (seq.pagesNeeded > free) break; // FIFO: a large prompt is not starved by smaller ones
      const reservation = this.pool.reserve({ tenant: seq.request.tenant, request: seq.request.id }, seq.pagesNeeded);
      assert(reservation !== undefined, 'admission checked the free pages');
      free -= seq.pagesNeeded;
      seq.reservation = reservation;
      seq.table = this.pool.acquire(reservation);
      this.waiting.shift();
      this.running.push(seq);
    }
  }

  private plan(): { seq: PrefillSequence; input: { table: PageTable; tokens: number[]; logits: 'last' | 'none' } }[] {
    let budget = this.config.stepTokenBudget;
    const planned = [];
    for (const seq of this.running) {
      if (budget === 0) break;
      const table = seq.table!;
      const prompt = seq.request.promptTokens;
      const start = table.writtenTokens;
      const count = Math.min(this.config.prefillChunkTokens, prompt.length - start, budget);
      assert(count > 0, 'a prefilling sequence has prompt left');
      const last = start + count === prompt.length;
      planned.push({
        seq,
        input: { table, tokens: prompt.slice(start, start + count), logits: last ? 'last' : 'none' } as const,
      });
      budget -= count;
    }
    return planned;
  }

  private fail(seq: PrefillSequence, error: KvfenceError, events: PrefillEvent[]): void {
    this.remove(seq);
    events.push({ kind: 'failed', request: seq.request.id, error });
  }

  private remove(seq: PrefillSequence): void {
    const queue = seq.reservation === undefined ? this.waiting : this.running;
    const index = queue.indexOf(seq);
    assert(index >= 0, `prefill sequence ${seq.request.id} is in its queue`);
    queue.splice(index, 1);
    if (seq.reservation !== undefined) this.pool.release(seq.reservation);
    seq.table = undefined;
  }

  private find(requestId: string): PrefillSequence | undefined {
    return this.running.find((s) => s.request.id === requestId) ?? this.waiting.find((s) => s.request.id === requestId);
  }
}
