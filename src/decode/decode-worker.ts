/**
 * The decode worker (DESIGN §1, §3 steps 1, 4, 5): reserves a request's pages, receives and verifies its prompt KV
 * through the TransferReceiver, and only then lets it join the continuous batch (a BatchRunner over this worker's
 * own pool). A request here is in one of three states:
 *
 *   queued ──admitted (admission.ts)──▶ transferring ──COMMITTED──▶ decoding ──▶ its one ending
 *     └── queue timeout: 503             └── any other transfer ending: pages scrubbed, end(failed)
 *
 * Admission is the shared rule: a tenant at its page quota waits, other tenants pass; only a full pool or batch makes
 * everyone wait. All its pages (prompt + maxTokens) are reserved at once, stamped with the owner, written = 0: the
 * prompt pages as the transfer's sink, the rest apart, acquired into the same table at COMMIT. Nothing is scheduled on
 * the pages before the transfer is COMMITTED, and the first token is the one bound to this request's COMMIT.
 */

import type { PoolStats } from '../cluster/control-protocol.js';
import { poolStats } from '../cluster/pool-stats.js';
import { checkFits, validateRequest } from '../engine/admission.js';
import type { BatchRunner } from '../engine/batch-runner.js';
import { choiceRequest, pagesOfRequest, tailPages } from '../engine/choice-group.js';
import { GrammarWaits } from '../engine/grammar-waits.js';
import type { GenerationSink } from '../engine/inference-worker.js';
import type { GeneratedToken, GenerationEnd, GenerationRequest } from '../engine/request.js';
import type { SequenceSampler } from '../engine/sequence-sampler.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import { PAGE_MAP_TRANSFERS_MAX, type PageMapReport, pageMapOf, type TransferProgress } from '../kv/page-map.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import { reserveTransferSink, type TransferReservation } from '../transfer/pool-adapter.js';
import type { TransferOutcome } from '../transfer/receive-session.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { TransferError, transferEndError } from '../transfer/transfer-error.js';
import type { TransferHandle, TransferReceiver } from '../transfer/transfer-receiver.js';
import type { FirstToken, TokenLogprobWire } from '../transfer/wire-format.js';
import { assert } from '../util/assert.js';
import { asKvfenceError, errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';

/** Where a request's answers go: its gateway's control connection. */
export interface DecodeRequestLink {
  /** the connection the request came by: `cancelAll(origin)` when it closes */
  readonly origin: object;
  reserved(ticket: TransferTicket): void;
  /** `choice`: which of the request's n answers (0 when n = 1) */
  token(token: GeneratedToken, choice: number): void;
  end(end: GenerationEnd): void;
}

export interface DecodeWorkerOptions {
  /** the continuous batch over `pool` */
  runner: BatchRunner;
  pool: PagePool;
  receiver: TransferReceiver;
  /** this worker's I1 proof */
  provenContext: number;
  vocabSize: number;
  /** the whole transfer must COMMIT within this of the reservation */
  transferDeadlineMs: number;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  log: LogSink;
}

type DecodeState =
  | { readonly name: 'queued'; readonly timer: NodeJS.Timeout }
  | {
      readonly name: 'transferring';
      readonly transfer: TransferReservation;
      readonly extra: PageReservation;
      /** n > 1: the other choices' own pages (choice-group.ts) */
      readonly siblings: PageReservation[];
      readonly handle: TransferHandle;
    }
  | { readonly name: 'decoding' };

interface Held {
  readonly request: GenerationRequest;
  /** one per choice, built at reserve (a bad option or schema is refused before any page), fed its first token at COMMIT */
  readonly samplers: SequenceSampler[];
  readonly link: DecodeRequestLink;
  readonly pagesNeeded: number;
  /** batch slots: one per choice */
  readonly slots: number;
  readonly tenant: string;
  readonly tenantPagesMax: number;
  state: DecodeState;
}

export class DecodeWorker {
  private readonly held = new Map<string, Held>();
  private readonly queue: Held[] = [];
  private readonly waits: GrammarWaits;
  private transferring = 0;
  private closed = false;

  constructor(private readonly options: DecodeWorkerOptions) {
    this.waits = new GrammarWaits(options.runner.engine.config.grammars, options.queueTimeoutMs);
    options.runner.engine.admitOutside((tenant) => this.transferSlots(tenant));
    options.runner.admitWhenSlotsFree(() => this.admit());
  }

  get provenContext(): number {
    return this.options.provenContext;
  }

  /**
   * Step 1: queue the request for its pages, once its output grammar is built (GrammarWaits: off this thread, where
   * the batch steps); its ticket (or its failure) goes to `link`.
   */
  reserve(request: GenerationRequest, link: DecodeRequestLink): void {
    const failed = (error: KvfenceError) => link.end({ kind: 'failed', error });
    try {
      if (this.closed) throw new KvfenceError('worker_unavailable', 'the decode worker is shutting down');
      validateRequest(request, this.options); // I2 again (defence in depth): the same 400 the gateway gives
      // ids are made by the gateway and unique; a duplicate is refused, never merged (DESIGN §6)
      if (this.held.has(request.id) || this.waits.has(request.id))
        throw new KvfenceError('invalid_argument', `request id ${request.id} is already in use here`);
      if ((request.choices ?? 1) > this.options.runningMax)
        throw new KvfenceError(
          'invalid_request_error',
          `n above this worker's batch (${this.options.runningMax})`,
          'n',
        );
      this.waits.whenReady(request, () => this.queueUp(request, link), failed, link.origin);
    } catch (error) {
      failed(asKvfenceError(error));
    }
  }

  /** Queues a valid request whose grammar (if any) is cached: its samplers now, its pages when admitted. */
  private queueUp(request: GenerationRequest, link: DecodeRequestLink): void {
    let pagesNeeded: number;
    let samplers: SequenceSampler[];
    try {
      const { engine } = this.options.runner;
      samplers = Array.from({ length: request.choices ?? 1 }, (_, c) => engine.samplerFor(choiceRequest(request, c)));
      pagesNeeded = pagesOfRequest(request, this.options.pool.layout.pageSize);
      checkFits(pagesNeeded, this.options.pool.pageCount, request.tenantKvPagesMax, 'decode');
      if (this.queue.length >= this.options.waitingMax)
        throw new KvfenceError(
          'server_overloaded',
          `the decode queue is full (${this.options.waitingMax}); retry later`,
        );
    } catch (error) {
      link.end({ kind: 'failed', error: asKvfenceError(error) });
      return;
    }
    const h: Held = {
      request,
      samplers,
      link,
      pagesNeeded,
      slots: samplers.length,
      tenant: request.tenant,
      tenantPagesMax: request.tenantKvPagesMax,
      state: { name: 'queued', timer: setTimeout(() => this.expire(h), this.options.queueTimeoutMs) },
    };
    this.held.set(request.id, h);
    this.queue.push(h);
    this.admit();
  }

  /**
   * Answer `choice` of a decoding n > 1 request is over for its client (a stop sequence at the gateway, which sent the
   * request on `origin`): the batch stops generating it (Engine.endChoice).
   */
  endChoice(requestId: string, choice: number, origin: object): void {
    const h = this.held.get(requestId);
    if (h?.state.name === 'decoding' && h.link.origin === origin) this.options.runner.endChoice(requestId, choice);
  }

  /** Step 5: the gateway cancels; the request's pages are scrubbed and free before this returns. */
  cancel(requestId: string): void {
    if (this.waits.withdraw(requestId)) return;
    const h = this.held.get(requestId);
    if (h === undefined) return;
    this.drop(h);
    this.admit();
  }

  /** Everything a control connection started: cancelled when that gateway goes away. */
  cancelAll(origin: object): void {
    this.waits.withdrawFrom(origin);
    for (const h of [...this.held.values()]) if (h.link.origin === origin) this.drop(h);
    this.admit();
  }

  stats(): PoolStats {
    const tenants = [...this.held.values()].map((h) => h.tenant);
    const running = this.options.runner.engine.stats().running + this.transferring;
    return poolStats(this.options.pool, tenants, running, this.queue.length);
  }

  /** The dashboard's picture of the pool: a transferring request's pages show as on the wire, with its progress. */
  pageMapReport(): PageMapReport {
    const { pageSize } = this.options.pool.layout;
    const transfers: TransferProgress[] = [];
    const onWire = new Set<string>();
    for (const h of this.held.values()) {
      if (h.state.name !== 'transferring') continue;
      onWire.add(h.request.id);
      if (transfers.length >= PAGE_MAP_TRANSFERS_MAX) continue;
      const { sink, table } = h.state.transfer;
      // pages arrive whole and in order: the table's written tokens say how many have landed
      transfers.push({
        request: h.request.id,
        tenant: h.tenant,
        pages: sink.pageCount,
        pagesDone: Math.ceil(table.writtenTokens / pageSize),
      });
    }
    return { map: pageMapOf(this.options.pool, (request) => onWire.has(request)), transfers };
  }

  async close(): Promise<void> {
    this.closed = true;
    const error = new KvfenceError('worker_unavailable', 'the decode worker is shutting down');
    this.waits.failAll(error);
    for (const h of [...this.held.values()]) {
      this.drop(h);
      h.link.end({ kind: 'failed', error });
    }
    this.options.receiver.close();
    this.options.runner.close(error);
  }

  /**
   * Admits what the shared rule allows now (Engine.admitFrom): paused sequences back into the batch, queued requests
   * each into its transfer, the tenant holding least first; sequences of tenants holding more pause for one that waits
   * for batch slots alone.
   */
  private admit(): void {
    if (this.closed) return;
    this.options.runner.admitFrom(this.queue, (h) => {
      this.queue.splice(this.queue.indexOf(h), 1);
      assert(h.state.name === 'queued', 'only queued requests are admitted');
      clearTimeout(h.state.timer);
      this.startTransfer(h);
    });
  }

  /** Batch slots held for transfers in flight (per tenant, or all): they join the engine's batch at COMMIT. */
  private transferSlots(tenant?: string): number {
    let slots = 0;
    for (const h of this.held.values())
      if (h.state.name === 'transferring' && (tenant === undefined || h.tenant === tenant)) slots += h.slots;
    return slots;
  }

  private startTransfer(h: Held): void {
    const { pool } = this.options;
    const { request } = h;
    const owner = { tenant: request.tenant, request: request.id };
    const transfer = reserveTransferSink(pool, owner, request.promptTokens.length);
    assert(transfer !== undefined, 'admission checked the free pages');
    const prompt = request.promptTokens.length;
    const reserve = (count: number) => {
      const r = pool.reserve(owner, count);
      assert(r !== undefined, 'admission checked the free pages');
      return r;
    };
    // one choice's pages (prompt + maxTokens) as for any request, then each other choice's own tail
    const extra = reserve(pagesForTokens(pool.layout, prompt + request.maxTokens) - transfer.sink.pageCount);
    const tail = tailPages(pool.layout.pageSize, prompt, request.maxTokens);
    const siblings = Array.from({ length: (request.choices ?? 1) - 1 }, () => reserve(tail));
    let handle: TransferHandle;
    try {
      handle = this.options.receiver.expect({
        request: request.id,
        tenant: request.tenant,
        epoch: transfer.epoch,
        tokenCount: request.promptTokens.length,
        pageSizeTokens: pool.layout.pageSize,
        sink: transfer.sink,
        deadlineMs: this.options.transferDeadlineMs,
      });
    } catch (error) {
      for (const r of [transfer.reservation, extra, ...siblings]) pool.release(r);
      this.forget(h);
      h.link.end({ kind: 'failed', error: asKvfenceError(error) });
      return;
    }
    this.moveTo(h, { name: 'transferring', transfer, extra, siblings, handle });
    void handle.outcome.then((outcome) => this.onOutcome(h, outcome));
    h.link.reserved(handle.ticket);
  }

  /**
   * What is wrong with a COMMIT's first tokens, if anything: one a choice; ids inside the vocabulary; logprobs that are
   * logprobs (≤ 0, not NaN); as many alternatives as the request asked for. They go to the client as they are, and a
   * value the control protocol refuses would end the gateway's connection, and every request on it (I5, I6).
   */
  private wrongFirstTokens(firsts: readonly FirstToken[], h: Held): string | undefined {
    if (firsts.length !== h.samplers.length)
      return `carries ${firsts.length} first tokens for ${h.samplers.length} choices`;
    const { vocabSize } = this.options;
    const bad = (t: TokenLogprobWire) => !(Number.isInteger(t.id) && t.id >= 0 && t.id < vocabSize && t.logprob <= 0);
    for (const first of firsts) {
      if (bad(first) || first.top.some(bad)) return 'carries a first token outside the vocabulary or its logprob range';
      if (first.top.length > h.request.topLogprobs)
        return `carries ${first.top.length} alternatives for ${h.request.topLogprobs}`;
    }
    return undefined;
  }

  /** Step 4: only a COMMITTED transfer lets the request decode; every other ending fails it, pages scrubbed. */
  private onOutcome(h: Held, outcome: TransferOutcome): void {
    const state = h.state;
    if (this.held.get(h.request.id) !== h || state.name !== 'transferring') return; // dropped meanwhile
    if (outcome.state !== 'COMMITTED') {
      if (outcome.state === 'FAILED' || outcome.state === 'EXPIRED')
        this.options.log.warn(
          { request: h.request.id, tenant: h.tenant, err: outcome.error.message },
          'KV transfer failed',
        );
      this.endNow(h, { kind: 'failed', error: transferEndError(outcome.error) });
      return;
    }
    const { request } = h;
    const wrong = this.wrongFirstTokens(outcome.firstTokens, h);
    if (wrong !== undefined) {
      const error = transferEndError(new TransferError('commit_mismatch', `the COMMIT ${wrong}`));
      this.endNow(h, { kind: 'failed', error });
      return;
    }
    if (h.samplers.length > 1) {
      const firsts = outcome.firstTokens.map((f) => ({
        id: f.id,
        logprob: f.logprob,
        top: f.top.map((t) => ({ ...t })),
      }));
      this.startChoices(h, state, firsts);
      return;
    }
    const first = outcome.firstTokens[0]!;
    // the prefill drew it with its own copy of this sampler: replaying it checks it could have been drawn here, and
    // brings the draws, the penalties' history and the grammar to where a colocated run would have them
    const choice = h.samplers[0]!.replay(first.id);
    if (choice.kind === 'failed') {
      this.endNow(h, { kind: 'failed', error: choice.error });
      return;
    }
    const prompt = request.promptTokens.length;
    if (choice.kind === 'stop') {
      this.endNow(h, { kind: 'finished', reason: 'stop', promptTokens: prompt, completionTokens: 0 });
      return;
    }
    h.link.token({ id: first.id, logprob: first.logprob, top: first.top.map((t) => ({ ...t })) }, 0);
    if (choice.finished || request.maxTokens === 1) {
      const reason = choice.finished ? 'stop' : 'length';
      this.endNow(h, { kind: 'finished', reason, promptTokens: prompt, completionTokens: 1 });
      return;
    }
    this.startDecoding(h, state, first.id);
  }

  /** The committed table gets the pages for generated tokens and joins the batch; the runner owns its pages then. */
  private startDecoding(h: Held, state: Extract<DecodeState, { name: 'transferring' }>, first: number): void {
    const table = this.options.pool.acquire(state.extra, state.transfer.table);
    const adoption = {
      request: h.request,
      table,
      reservation: state.transfer.reservation,
      extraReservation: state.extra,
      first,
      sampler: h.samplers[0]!,
    };
    try {
      this.options.runner.adopt(adoption, this.sinkOf(h));
    } catch (error) {
      // not adopted (the runner holds nothing of it): the pages are still this state's to release
      this.endNow(h, { kind: 'failed', error: asKvfenceError(error) });
      return;
    }
    this.moveTo(h, { name: 'decoding' });
  }

  /**
   * n > 1: the choices join the batch together, forking from the committed table (each replays its first token: the
   * engine emits those, and ends a choice that ends at it). The runner owns every page then.
   */
  private startChoices(
    h: Held,
    state: Extract<DecodeState, { name: 'transferring' }>,
    firsts: readonly GeneratedToken[],
  ): void {
    const adoption = {
      request: h.request,
      table: this.options.pool.acquire(state.extra, state.transfer.table),
      reservation: state.transfer.reservation,
      extraReservation: state.extra,
      siblingTails: state.siblings,
      firsts,
      samplers: h.samplers,
    };
    try {
      this.options.runner.adoptChoices(adoption, this.sinkOf(h));
    } catch (error) {
      this.endNow(h, { kind: 'failed', error: asKvfenceError(error) }); // not adopted: the pages are still ours
      return;
    }
    if (this.held.get(h.request.id) === h) this.moveTo(h, { name: 'decoding' }); // unless every choice ended at once
  }

  /** Where the runner sends a decoding request's tokens and its one ending. */
  private sinkOf(h: Held): GenerationSink {
    return {
      onToken: (token, choice) => h.link.token(token, choice),
      onEnd: (end) => {
        this.forget(h);
        h.link.end(end);
        queueMicrotask(() => this.admit());
      },
    };
  }

  /** Ends a request that the runner does not hold: its pages back, its one ending out, the queue moves. */
  private endNow(h: Held, end: GenerationEnd): void {
    this.drop(h);
    h.link.end(end);
    this.admit();
  }

  /** Forgets a request and gives back every page it holds (scrubbed), whatever its state. */
  private drop(h: Held): void {
    const state = h.state;
    this.forget(h);
    switch (state.name) {
      case 'queued': {
        clearTimeout(state.timer);
        const i = this.queue.indexOf(h);
        if (i >= 0) this.queue.splice(i, 1);
        break;
      }
      case 'transferring':
        try {
          state.handle.cancel('cancelled'); // scrubs the prompt pages (no effect once terminal)
        } catch (error) {
          // a sink that throws as it scrubs (a bug) stops neither the releases below nor a cancelAll's or close's others
          this.options.log.error(
            { request: h.request.id, err: errorMessage(error) },
            'cancelling a KV transfer failed',
          );
        }
        // the prompt pages too (release is idempotent): what a throwing sink did not give back is given back here
        for (const r of [state.transfer.reservation, state.extra, ...state.siblings]) this.options.pool.release(r);
        break;
      case 'decoding':
        this.options.runner.cancel(h.request.id); // the engine releases both reservations
        break;
    }
  }

  private expire(h: Held): void {
    if (this.held.get(h.request.id) !== h || h.state.name !== 'queued') return;
    this.endNow(h, {
      kind: 'failed',
      error: new KvfenceError(
        'server_overloaded',
        `no decode KV pages became free within ${this.options.queueTimeoutMs} ms; retry later`,
      ),
    });
  }

  private moveTo(h: Held, next: DecodeState): void {
    if (h.state.name === 'transferring') this.transferring--;
    if (next.name === 'transferring') this.transferring++;
    h.state = next;
    assert(this.transferring >= 0 && this.transferring <= this.held.size, 'transfer count stays within the held');
  }

  private forget(h: Held): void {
    if (this.held.get(h.request.id) !== h) return;
    this.held.delete(h.request.id);
    if (h.state.name === 'transferring') this.transferring--;
    assert(this.transferring >= 0, 'transfer count stays non-negative');
  }
}
