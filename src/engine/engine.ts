/**
 * The serving engine: queues, the running batch and one `step()` at a time (expire → admit → plan → forward → sample →
 * release). No I/O and no timers: time comes in as an argument (the engine times its own forward passes only to size
 * each step's prompt tokens, prefill-pace.ts), results go out as returned events, so the same engine
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
import {
  type AdmissionCandidate,
  type AdmissionRoom,
  admissionPass,
  checkFits,
  slotDonors,
  validateRequest,
} from './admission.js';
import { ChoiceGroup, choiceRequest, pagesOfRequest } from './choice-group.js';
import { type EngineConfig, validateEngineConfig } from './engine-config.js';
import { grantPages, poolRoom } from './page-grant.js';
import { type PrefillPace, paceOf } from './prefill-pace.js';
import type { EngineEvent, GeneratedToken, GenerationRequest } from './request.js';
import { SamplingScratch } from './sampler.js';
import { type Ahead, type PlannedInput, planStep } from './scheduler.js';
import { Sequence } from './sequence.js';
import { type SamplingEnv, SequenceSampler, samplingEnv, type TokenChoice } from './sequence-sampler.js';
import { describeToken } from './token-logprobs.js';

export interface EngineStats {
  /** admitted requests' sequences: in the batch, or paused (their pages held) */
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

/**
 * What a decode worker hands the engine for an n > 1 request once its transfer committed (`Engine.adoptChoices`): the
 * table as for one choice (prompt + the leader's pages for generated tokens), the other choices' tails, a first token
 * and a fresh sampler per choice.
 */
export interface TransferredChoices {
  request: GenerationRequest;
  table: PageTable;
  /** the transferred prompt pages: the choices' shared head, released with the last choice */
  reservation: PageReservation;
  /** the leader's pages for generated tokens */
  extraReservation: PageReservation;
  /** choices 1..n-1's own pages */
  siblingTails: PageReservation[];
  /** choice i's first token, drawn by the prefill worker with its copy of `samplers[i]` */
  firsts: readonly GeneratedToken[];
  samplers: SequenceSampler[];
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
  /** admitted sequences out of the batch for now, their pages held, so a tenant holding fewer slots can run (I11) */
  private readonly paused: Sequence[] = [];
  /** with an owner that admits (a decode worker): batch slots it holds for sequences joining later (admitOutside) */
  private slotsOutside: ((tenant?: string) => number) | undefined;
  private readonly tenantRequests = new Map<string, number>();
  protected readonly pool: PagePool;
  private readonly prefixCache: PrefixCache | undefined;
  private readonly sampling: SamplingEnv;
  private readonly scratch: SamplingScratch;
  private readonly pace: PrefillPace | undefined;
  /** how far ahead each tenant's prompts are of the others' (scheduler.ts fairShares) */
  private readonly ahead: Ahead = new Map();

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
    this.pace = paceOf(config, forward.keysOf);
    // I1 again where the pages are: the largest accepted request fits the pool.
    assert(
      pagesForTokens(this.pool.layout, config.provenContext) <= this.pool.pageCount,
      'the proven context fits the pool',
    );
  }

  get hasWork(): boolean {
    // paused sequences wait for their admitter: this engine's next step, or an owner's admitFrom (which kicks the loop)
    return this.waiting.length > 0 || this.running.length > 0 || (this.paused.length > 0 && !this.ownerAdmits);
  }

  private get ownerAdmits(): boolean {
    return this.slotsOutside !== undefined;
  }

  /**
   * For a worker whose queue sits outside the engine (a decode worker: requests wait there, then for their transfer):
   * from now on admission is the owner's (`admitFrom` with its own queue). The engine counts `slotsOutside` (per
   * tenant, or all) as taken batch slots, and its steps admit nothing.
   */
  admitOutside(slotsOutside: (tenant?: string) => number): void {
    assert(this.slotsOutside === undefined && this.waiting.length === 0, 'one owner admits, before any request');
    this.slotsOutside = slotsOutside;
  }

  /** Queues a request or throws a KvfenceError (400 invalid or over the context, 503 queue full): nothing reserved then. */
  submit(request: GenerationRequest, nowMs: number): void {
    validateRequest(request, this.config); // defence in depth (I2): the gateway checked this already
    assert(!this.find(request.id), `request id ${request.id} is already in use`);
    const choices = request.choices ?? 1;
    if (!Number.isInteger(choices) || choices < 1 || choices > this.config.runningMax) {
      const most = this.config.runningMax;
      throw new KvfenceError('invalid_request_error', `n must be an integer from 1 to ${most} (the batch) here`, 'n');
    }
    const sampler = this.samplerFor(request);
    const pagesNeeded = pagesOfRequest(request, this.pool.layout.pageSize);
    checkFits(pagesNeeded, this.pool.pageCount, request.tenantKvPagesMax, 'KV');
    if (this.waiting.length >= this.config.waitingMax) {
      throw new KvfenceError(
        'server_overloaded',
        `the waiting queue is full (${this.config.waitingMax} requests); retry later`,
      );
    }
    const seq = new Sequence(request, pagesNeeded, nowMs + this.config.queueTimeoutMs, sampler);
    if (choices > 1) {
      seq.group = ChoiceGroup.of(request, this.pool.layout.pageSize);
      for (let c = 1; c < choices; c++) seq.group.samplers.push(this.samplerFor(choiceRequest(request, c)));
    }
    this.waiting.push(seq);
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
    assert((request.choices ?? 1) === 1, 'a transferred request has one choice');
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

  /**
   * The n > 1 counterpart of `adoptTransferred`: the choices fork from the transferred table at once (choice-group.ts)
   * and each replays its first token. Returns the events of those first tokens (and of choices that end at them), for
   * the caller to deliver; throws (nothing taken over) when the batch has no room for every choice.
   */
  adoptChoices(adoption: TransferredChoices, nowMs: number): EngineEvent[] {
    const { request, table, reservation, extraReservation, siblingTails, firsts, samplers } = adoption;
    const choices = request.choices ?? 1;
    assert(!this.find(request.id), `request id ${request.id} is already in use`);
    assert(table.writtenTokens === request.promptTokens.length, 'the transferred table holds exactly the prompt');
    assert(
      choices >= 2 && firsts.length === choices && samplers.length === choices && siblingTails.length === choices - 1,
      'a first token, a sampler and (but for the leader) a tail per choice',
    );
    if (this.runningSlots() + choices > this.config.runningMax) {
      throw new KvfenceError('server_overloaded', `the running batch is full (${this.config.runningMax} sequences)`);
    }
    const group = ChoiceGroup.of(request, this.pool.layout.pageSize);
    group.head = reservation;
    group.siblingTails = [...siblingTails];
    group.samplers.push(...samplers.slice(1));
    const leader = new Sequence(request, 0, nowMs, samplers[0]!);
    leader.group = group;
    leader.extraReservation = extraReservation;
    leader.table = table;
    leader.state = 'prefilling';
    this.running.push(leader);
    this.countRequest(request.tenant, +1);
    const events: EngineEvent[] = [];
    for (const seq of this.forkOrFail(leader, nowMs, events)) {
      const first = firsts[seq.choice]!;
      if (this.isQueued(seq)) this.take(seq, seq.sampler.replay(first.id), () => first, events);
    }
    return events;
  }

  /** A request's token picker; throws a 400 KvfenceError for an option or response format it cannot follow. */
  samplerFor(request: GenerationRequest): SequenceSampler {
    return new SequenceSampler(request, this.sampling);
  }

  /** Drops a request wherever it is; its pages are scrubbed and free before this returns. False when unknown/ended. */
  cancel(requestId: string): boolean {
    const seq = this.find(requestId);
    if (seq === undefined) return false;
    for (const member of this.membersOf(seq)) this.remove(member);
    return true;
  }

  /**
   * Answer `choice` of a running n > 1 request is over for its client (a stop sequence ended it at the gateway): it
   * leaves the batch as if it had stopped there, its own pages back (scrubbed); the request still ends once, with its
   * last choice. Its events (the request's ending, when this was its last choice). Nothing for an unknown request, a
   * choice that ended already or has not forked yet, or a request of one answer (its client cancels it instead).
   */
  endChoice(requestId: string, choice: number): EngineEvent[] {
    const seq = this.find(requestId);
    if (seq?.group === undefined) return [];
    const member = this.membersOf(seq).find((s) => s.choice === choice && s.state === 'decoding');
    if (member === undefined || !seq.group.forked) return [];
    const events: EngineEvent[] = [];
    this.finish(member, 'stop', events);
    return events;
  }

  /** One scheduling step. Returns what happened; never throws for a request's failure. */
  step(nowMs: number): EngineEvent[] {
    const events: EngineEvent[] = [];
    this.expireWaiting(nowMs, events);
    if (!this.ownerAdmits) this.admit();
    const planned = planStep(this.config, this.running, this.pace, this.ahead);
    if (planned.length === 0) return events;
    let outputs: ForwardOutput[];
    try {
      const started = performance.now();
      outputs = this.forward.run(planned.map((p) => p.input));
      this.timeStep(planned, performance.now() - started);
    } catch (error) {
      // A bug in the batch (not a request's fault): fail its requests honestly (I6) and free their pages (I8).
      const bug = error instanceof Error ? error : new Error(errorMessage(error));
      events.push({ kind: 'bug', error: bug });
      for (const { seq } of planned)
        if (this.isQueued(seq))
          this.fail(seq, new KvfenceError('internal_error', 'internal error while running the model'), events);
      return events;
    }
    planned.forEach(({ seq }, i) => {
      const out = outputs[i]!;
      if (!this.isQueued(seq)) return; // a choice whose request failed earlier in this step
      try {
        if (!out.ok) this.failForward(seq, out.error, nowMs, events);
        else if (seq.state === 'prefilling' && seq.table!.writtenTokens < seq.request.promptTokens.length) return;
        else if (seq.state === 'decoding') this.sampleNext(seq, out.logits, events);
        else if (this.publishPrefix(seq, nowMs, events)) {
          if (seq.group === undefined) this.sampleNext(seq, out.logits, events);
          else this.forkChoices(seq, out.logits, nowMs, events);
        }
      } catch (error) {
        // a bug in one request's token (its sampler): that request fails, not the step and every tenant's with it
        events.push({ kind: 'bug', error: error instanceof Error ? error : new Error(errorMessage(error)) });
        if (this.isQueued(seq))
          this.fail(seq, new KvfenceError('internal_error', 'internal error while choosing a token'), events);
      }
    });
    return events;
  }

  private timeStep(planned: readonly PlannedInput[], ms: number): void {
    if (this.pace === undefined) return;
    const prompts = planned.filter((p) => p.seq.state === 'prefilling');
    const promptTokens = prompts.reduce((n, p) => n + p.input.tokens.length, 0);
    const decoded = prompts.length < planned.length; // the rest are decoders
    this.pace.record({ promptTokens, decoded, ms, attention: this.forward.lastAttention });
  }

  /** Fails every request (shutdown); each gets its end event and its pages back. */
  abortAll(error: KvfenceError): EngineEvent[] {
    const events: EngineEvent[] = [];
    for (const seq of [...this.running, ...this.paused, ...this.waiting])
      if (this.isQueued(seq)) this.fail(seq, error, events);
    return events;
  }

  stats(): EngineStats {
    const tenants = new Map<string, { requests: number; pages: number }>();
    for (const [tenant, requests] of this.tenantRequests)
      tenants.set(tenant, { requests, pages: this.pool.pagesOfTenant(tenant) });
    return {
      running: this.running.length + this.paused.length,
      waiting: this.waiting.length,
      pagesTotal: this.pool.pageCount,
      pagesFree: this.pool.freePageCount,
      ...(this.prefixCache !== undefined ? this.prefixCache.stats() : {}),
      tenants,
    };
  }

  /** Ids of a tenant's admitted requests (in the batch or paused), in the batch's order, then the paused ones'. */
  runningRequestsOf(tenant: string): string[] {
    return [
      ...new Set(
        this.admitted()
          .filter((s) => s.tenant === tenant)
          .map((s) => s.id),
      ),
    ];
  }

  /** Ids of the paused requests, oldest pause first. */
  pausedRequests(): string[] {
    return this.paused.map((s) => s.id);
  }

  /** The page table an admitted request (or one of its n choices) reads through (tests look at it and corrupt it). */
  runningTable(requestId: string, choice = 0): PageTable | undefined {
    return this.admitted().find((s) => s.id === requestId && s.choice === choice)?.table;
  }

  /** This engine's own admission (a colocated worker's): its waiting requests get their pages and join the batch. */
  private admit(): void {
    this.admitFrom(this.waiting, (seq) => {
      this.grant(seq);
      this.running.push(seq);
    });
  }

  /**
   * One admission (admission.ts) over the paused sequences, which rejoin the batch, and `queue`'s requests, which
   * `start` takes on (into this batch, or into a decode worker's transfer): the tenant holding least first. When the
   * one chosen waits for batch slots alone, sequences of tenants holding more pause to make them; the next round admits
   * it (slotDonors keeps every donor's share above its own). The rounds are bounded by the batch. True when a paused
   * sequence rejoined the batch (an owner's step loop has work again).
   */
  admitFrom<T extends AdmissionCandidate>(queue: readonly T[], start: (candidate: T) => void): boolean {
    let resumed = false;
    for (let round = 0; round <= this.config.runningMax; round++) {
      if (queue.length === 0 && this.paused.length === 0) break; // the room's evictable count walks the cache
      // a paused sequence holds its pages already (no quota to meet) and needs one slot to go on
      const paused = new Map<AdmissionCandidate, Sequence>(
        this.paused.map((seq) => [
          { tenant: seq.tenant, pagesNeeded: 0, tenantPagesMax: Infinity, resumes: true },
          seq,
        ]),
      );
      const queued = (candidate: AdmissionCandidate | T): candidate is T => !paused.has(candidate);
      const pass = admissionPass([...paused.keys(), ...queue], this.admissionRoom());
      for (const candidate of pass.admitted) {
        if (queued(candidate)) {
          start(candidate);
          continue;
        }
        const seq = paused.get(candidate)!;
        this.paused.splice(this.paused.indexOf(seq), 1);
        this.running.push(seq);
        resumed = true;
      }
      if (pass.waitsForSlots === undefined || !this.pauseFor(pass.waitsForSlots)) break;
    }
    return resumed;
  }

  /**
   * Pauses a sequence of each donor slotDonors names for `waiter`: the one paused fewest times so far, the youngest of
   * those (so a tenant's pauses go round its streams instead of falling on the one that resumed last); false when it
   * names none.
   */
  protected pauseFor(waiter: AdmissionCandidate): boolean {
    const pausable = new Map<string, number>();
    for (const seq of this.running.filter(canPause)) pausable.set(seq.tenant, (pausable.get(seq.tenant) ?? 0) + 1);
    const donors = slotDonors(waiter, this.admissionRoom(), pausable);
    if (donors === undefined) return false;
    for (const tenant of donors) {
      let chosen: Sequence | undefined;
      for (const seq of this.running)
        if (seq.tenant === tenant && canPause(seq) && (chosen === undefined || seq.pauses <= chosen.pauses))
          chosen = seq;
      assert(chosen !== undefined, 'a donor has a pausable sequence');
      this.running.splice(this.running.indexOf(chosen), 1);
      chosen.pauses++;
      this.paused.push(chosen);
    }
    return true;
  }

  /**
   * The pool and batch now, as admission sees them: the prefix cache's evictable pages count as free, and the slots an
   * owner holds outside (admitOutside) as taken.
   */
  private admissionRoom(): AdmissionRoom {
    const slotsOf = (tenant?: string) => this.runningSlots(tenant) + (this.slotsOutside?.(tenant) ?? 0);
    return poolRoom(this.pool, this.prefixCache, slotsOf(), this.config.runningMax, slotsOf);
  }

  /** A waiting request's pages (admission checked them against the free and evictable pages: cannot fail). */
  private grant(seq: Sequence): void {
    const cache = this.prefixCache;
    const owner = { tenant: seq.tenant, request: seq.id };
    if (seq.group !== undefined) {
      const grant = seq.group.grant(this.pool, cache, owner, seq.request.promptTokens);
      seq.reservation = grant.tail;
      seq.table = grant.table;
      seq.prefixKeys = grant.prefixKeys;
    } else {
      const grant = grantPages(this.pool, cache, owner, seq.request.promptTokens, seq.pagesNeeded);
      seq.reservation = grant.reservation;
      seq.table = grant.table;
      seq.prefixKeys = grant.prefixKeys;
      seq.prefixHits = grant.prefixHits;
    }
    seq.state = 'prefilling';
    this.waiting.splice(this.waiting.indexOf(seq), 1);
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
    const { topLogprobs, logprobs } = seq.request;
    const describe = (id: number) => describeToken(logits, id, topLogprobs, logprobs !== false);
    this.take(seq, seq.sampler.choose(logits, this.scratch), describe, events);
  }

  /** Acts on a sequence's next token (drawn here, or replayed from the prefill worker): emit it, end, or feed it next. */
  private take(seq: Sequence, choice: TokenChoice, describe: (id: number) => GeneratedToken, events: EngineEvent[]) {
    if (choice.kind === 'failed') {
      this.fail(seq, choice.error, events);
      return;
    }
    if (choice.kind === 'stop') {
      this.finish(seq, 'stop', events);
      return;
    }
    const { id } = choice;
    events.push({ kind: 'token', request: seq.id, token: describe(id), choice: seq.choice });
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

  /**
   * The leader of an n > 1 request has its prompt's logits: the other choices fork from it (choice-group.ts), then
   * each draws its first token from those logits with its own sampler, the leader first.
   */
  private forkChoices(leader: Sequence, logits: Float32Array, nowMs: number, events: EngineEvent[]): void {
    for (const seq of this.forkOrFail(leader, nowMs, events))
      if (this.isQueued(seq)) this.sampleNext(seq, logits, events);
  }

  /** The leader and the choices forked from it, running; none (the request failed, an incident) when a check fails. */
  private forkOrFail(leader: Sequence, nowMs: number, events: EngineEvent[]): Sequence[] {
    const group = leader.group!;
    const choices = [leader];
    try {
      for (let c = 1; c < group.choices; c++) {
        const seq = new Sequence(leader.request, group.tailPages, leader.admitDeadlineMs, group.samplers[c - 1]!);
        seq.choice = c;
        seq.group = group;
        seq.reservation = group.siblingTails[c - 1];
        seq.table = group.fork(this.pool, leader.table!, leader.request.promptTokens.length, c);
        seq.state = 'prefilling';
        this.running.push(seq);
        choices.push(seq);
      }
    } catch (error) {
      if (!(error instanceof KvIsolationError)) throw error;
      this.failForward(leader, error, nowMs, events); // the whole request, with the choices forked so far
      return [];
    }
    return choices;
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
    const promptTokens = seq.request.promptTokens.length;
    const group = seq.group;
    if (group === undefined) {
      const end = { kind: 'finished' as const, reason, promptTokens, completionTokens: seq.generatedCount };
      events.push({ kind: 'end', request: seq.id, end });
      return;
    }
    group.ends[seq.choice] = { reason, completionTokens: seq.generatedCount };
    if (group.live > 0) return; // the request ends with its last choice (I6: one ending)
    const choices = group.ends.map((e) => {
      assert(e !== undefined, 'every choice of a finished request ended');
      return e;
    });
    const completionTokens = choices.reduce((sum, e) => sum + e.completionTokens, 0);
    events.push({
      kind: 'end',
      request: seq.id,
      end: { kind: 'finished', reason, promptTokens, completionTokens, choices },
    });
  }

  /** A request's one failed ending (I6). Protected, with `finish` and `find`, for the mutation self-test. */
  protected fail(seq: Sequence, error: KvfenceError, events: EngineEvent[]): void {
    for (const member of this.membersOf(seq)) this.remove(member); // a failed choice fails its whole request
    events.push({ kind: 'end', request: seq.id, end: { kind: 'failed', error } });
  }

  /** Takes a sequence out of the queues and gives its pages back (scrubbed) and its tenant's slot. */
  private remove(seq: Sequence): void {
    const queue = this.queueOf(seq);
    assert(queue !== undefined, `sequence ${seq.id} is in its queue`);
    queue.splice(queue.indexOf(seq), 1);
    if (seq.reservation !== undefined) this.pool.release(seq.reservation);
    if (seq.extraReservation !== undefined) this.pool.release(seq.extraReservation);
    this.prefixCache?.detach(seq.prefixHits);
    seq.prefixHits = [];
    seq.table = undefined;
    if (seq.group === undefined || seq.group.leave(this.pool, this.prefixCache)) this.countRequest(seq.tenant, -1);
  }

  /**
   * Batch slots taken (by `tenant`'s requests, or all): a sequence each in the batch, an n > 1 request all n until its
   * choices fork (then each choice is a sequence of its own, which may pause).
   */
  runningSlots(tenant?: string): number {
    const groups = new Set<ChoiceGroup>();
    let slots = 0;
    for (const seq of this.running) {
      if (tenant !== undefined && seq.tenant !== tenant) continue;
      if (seq.group === undefined || seq.group.forked) slots++;
      else if (!groups.has(seq.group)) {
        groups.add(seq.group);
        slots += seq.group.choices;
      }
    }
    return slots;
  }

  /** Still in a queue (not removed by its request's failure earlier in the same step). */
  private isQueued(seq: Sequence): boolean {
    return this.queueOf(seq) !== undefined;
  }

  /** The queue a sequence is in: waiting, in the batch, or paused; none once removed. */
  private queueOf(seq: Sequence): Sequence[] | undefined {
    return [this.waiting, this.running, this.paused].find((queue) => queue.includes(seq));
  }

  /** Admitted sequences: the batch's, then the paused ones. */
  private admitted(): Sequence[] {
    return [...this.running, ...this.paused];
  }

  /** The sequence and, for an n > 1 request, its other choices (in the batch, paused, or the leader waiting). */
  private membersOf(seq: Sequence): Sequence[] {
    if (seq.group === undefined) return [seq];
    return [...this.running, ...this.paused, ...this.waiting].filter((s) => s.group === seq.group);
  }

  /** Requests per tenant, for stats: asserted where it changes, so a lost count shows at once. */
  private countRequest(tenant: string, delta: 1 | -1): void {
    const count = (this.tenantRequests.get(tenant) ?? 0) + delta;
    assert(count >= 0, 'tenant request counts stay non-negative');
    if (count === 0) this.tenantRequests.delete(tenant);
    else this.tenantRequests.set(tenant, count);
    const requests = this.waiting.length + this.running.length + this.paused.length;
    assert(this.tenantRequests.size <= requests, 'every counted tenant has a request');
  }

  protected find(requestId: string): Sequence | undefined {
    return this.admitted().find((s) => s.id === requestId) ?? this.waiting.find((s) => s.id === requestId);
  }
}

/** A sequence in the batch that may pause: one answer, or a choice of n once they have forked (each runs on its own). */
function canPause(seq: Sequence): boolean {
  return seq.group === undefined || seq.group.forked;
}
