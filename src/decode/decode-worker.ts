/**
 * The decode worker (DESIGN §1, §3 steps 1, 4, 5): reserves a request's pages, receives and verifies its prompt KV
 * through the TransferReceiver, and only then lets it decode with continuous batching (the colocated worker's step loop
 * and engine, over this worker's own pool). A request here is in one of three phases:
 *
 *   queued ──pages free (bounded wait, else 503)──▶ transferring ──COMMITTED──▶ decoding ──▶ end
 *                                                       └── any other transfer ending: pages scrubbed, end(failed)
 *
 * All its pages (prompt + maxTokens) are reserved at once, stamped with the owner, written = 0: the prompt pages as
 * the transfer's sink, the rest apart; both are released (scrubbed) on every ending. Nothing is scheduled on the pages
 * before the transfer is COMMITTED, and the first token is the one bound to this request's COMMIT.
 */

import { isErrorCode, type PoolStats } from '../cluster/control-protocol.js';
import { poolStats } from '../cluster/pool-stats.js';
import type { ColocatedWorker } from '../colocated/colocated-worker.js';
import type { LogSink } from '../engine/inference-worker.js';
import type { GeneratedToken, GenerationEnd, GenerationRequest } from '../engine/request.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import type { PageOwner } from '../kv/page-owner.js';
import type { PageReservation } from '../kv/page-pool.js';
import { reserveTransferSink, type TransferReservation } from '../transfer/pool-adapter.js';
import type { TransferOutcome } from '../transfer/receive-session.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { TransferError } from '../transfer/transfer-error.js';
import type { TransferHandle, TransferReceiver } from '../transfer/transfer-receiver.js';
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';

/** Where a request's answers go: its gateway's control connection. */
export interface DecodeRequestLink {
  /** the connection the request came by: `cancelAll(origin)` when it closes */
  readonly origin: object;
  reserved(ticket: TransferTicket): void;
  token(token: GeneratedToken): void;
  end(end: GenerationEnd): void;
}

export interface DecodeWorkerOptions {
  /** the step loop, engine and pool of this worker */
  loop: ColocatedWorker;
  receiver: TransferReceiver;
  /** the whole transfer must COMMIT within this of the reservation */
  transferDeadlineMs: number;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  tenantConcurrentMax: number;
  tenantKvPagesMax: number;
  isStopToken: (id: number) => boolean;
  vocabSize: number;
  log: LogSink;
}

interface Held {
  readonly request: GenerationRequest;
  readonly link: DecodeRequestLink;
  readonly pagesNeeded: number;
  phase: 'queued' | 'transferring' | 'decoding';
  cancelWait: (() => void) | undefined;
  transfer: TransferReservation | undefined;
  extra: PageReservation | undefined;
  handle: TransferHandle | undefined;
}

export class DecodeWorker {
  private readonly held = new Map<string, Held>();
  private readonly queue: Held[] = [];
  private closed = false;

  constructor(private readonly options: DecodeWorkerOptions) {}

  get provenContext(): number {
    return this.options.loop.provenContext;
  }

  /** Step 1: reserve pages for prompt + maxTokens, answer with a ticket — or an end(failed) with nothing reserved. */
  reserve(request: GenerationRequest, link: DecodeRequestLink): void {
    const refusal = this.refusal(request);
    if (refusal !== undefined) {
      link.end({ kind: 'failed', error: refusal });
      return;
    }
    const h: Held = {
      request,
      link,
      pagesNeeded: pagesForTokens(this.options.loop.pool.layout, request.promptTokens.length + request.maxTokens),
      phase: 'queued',
      cancelWait: undefined,
      transfer: undefined,
      extra: undefined,
      handle: undefined,
    };
    this.held.set(request.id, h);
    this.queue.push(h);
    const timer = setTimeout(() => {
      if (h.phase !== 'queued' || this.held.get(request.id) !== h) return;
      this.drop(h);
      link.end({
        kind: 'failed',
        error: new KvfenceError(
          'server_overloaded',
          `no decode KV pages became free within ${this.options.queueTimeoutMs} ms; retry later`,
        ),
      });
    }, this.options.queueTimeoutMs);
    h.cancelWait = () => clearTimeout(timer);
    this.drainQueue();
  }

  /** Step 5: the gateway cancels; the request's pages are scrubbed and free before this returns. */
  cancel(requestId: string): void {
    const h = this.held.get(requestId);
    if (h === undefined) return;
    this.drop(h);
    this.drainQueue();
  }

  /** Everything a control connection started: cancelled when that gateway goes away. */
  cancelAll(origin: object): void {
    for (const h of [...this.held.values()]) if (h.link.origin === origin) this.drop(h);
    this.drainQueue();
  }

  stats(): PoolStats {
    const { pool, engine } = this.options.loop;
    const tenants = [...this.held.values()].map((h) => h.request.tenant);
    return poolStats(pool, tenants, engine.stats().running + this.count('transferring'), this.queue.length);
  }

  async close(): Promise<void> {
    this.closed = true;
    const error = new KvfenceError('worker_unavailable', 'the decode worker is shutting down');
    for (const h of [...this.held.values()]) {
      this.drop(h);
      h.link.end({ kind: 'failed', error });
    }
    this.options.receiver.close();
    await this.options.loop.close();
  }

  private refusal(request: GenerationRequest): KvfenceError | undefined {
    if (this.closed) return new KvfenceError('worker_unavailable', 'the decode worker is shutting down');
    const { promptTokens, maxTokens, tenant, id } = request;
    // I2 again at the decode worker (defence in depth): the same 400 the gateway gives.
    if (promptTokens.length === 0 || promptTokens.length + maxTokens > this.provenContext) {
      return new KvfenceError(
        'context_length_exceeded',
        `prompt (${promptTokens.length} tokens) + max tokens (${maxTokens}) exceeds the decode worker's proven context of ${this.provenContext} tokens`,
        'messages',
      );
    }
    if (promptTokens.some((t) => t >= this.options.vocabSize))
      return new KvfenceError('invalid_request_error', 'a prompt token id is outside the vocabulary', 'prompt');
    // ids are made by the gateway and unique; a duplicate is refused, never merged (DESIGN §6)
    if (this.held.has(id)) return new KvfenceError('invalid_argument', `request id ${id} is already in use here`);
    let active = 0;
    for (const h of this.held.values()) if (h.request.tenant === tenant) active++;
    if (active >= this.options.tenantConcurrentMax) {
      return new KvfenceError(
        'rate_limit_exceeded',
        `tenant ${tenant} already has ${active} requests in flight (limit ${this.options.tenantConcurrentMax})`,
      );
    }
    if (this.queue.length >= this.options.waitingMax)
      return new KvfenceError(
        'server_overloaded',
        `the decode queue is full (${this.options.waitingMax}); retry later`,
      );
    return undefined;
  }

  /** FIFO: the head waits for its pages; the ones behind it wait too, so a large request is not starved. */
  private drainQueue(): void {
    const pool = this.options.loop.pool;
    while (this.queue.length > 0 && !this.closed) {
      const h = this.queue[0]!;
      const active = this.count('transferring') + this.count('decoding');
      const tenantPages = pool.pagesOfTenant(h.request.tenant);
      if (active >= this.options.runningMax || h.pagesNeeded > pool.freePageCount) return;
      if (tenantPages + h.pagesNeeded > this.options.tenantKvPagesMax) return;
      this.queue.shift();
      h.cancelWait?.();
      this.start(h);
    }
  }

  private start(h: Held): void {
    const { pool } = this.options.loop;
    const { request } = h;
    const owner: PageOwner = { tenant: request.tenant, request: request.id };
    const transfer = reserveTransferSink(pool, owner, request.promptTokens.length);
    assert(transfer !== undefined, 'the queue checked the free pages');
    const extra = pool.reserve(owner, h.pagesNeeded - transfer.sink.pageCount);
    assert(extra !== undefined, 'the queue checked the free pages');
    h.transfer = transfer;
    h.extra = extra;
    h.phase = 'transferring';
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
      this.drop(h);
      h.link.end({
        kind: 'failed',
        error: error instanceof KvfenceError ? error : new KvfenceError('internal_error', errorMessage(error)),
      });
      return;
    }
    h.handle = handle;
    void handle.outcome.then((outcome) => this.onOutcome(h, outcome));
    h.link.reserved(handle.ticket);
  }

  /** Step 4: only a COMMITTED transfer lets the request decode; every other ending fails it, pages scrubbed. */
  private onOutcome(h: Held, outcome: TransferOutcome): void {
    if (this.held.get(h.request.id) !== h || h.phase !== 'transferring') return; // cancelled meanwhile: dropped
    if (outcome.state !== 'COMMITTED') {
      this.drop(h); // the receiver scrubbed the prompt pages already; this releases the rest
      if (outcome.state === 'FAILED' || outcome.state === 'EXPIRED')
        this.options.log.warn(
          { request: h.request.id, tenant: h.request.tenant, err: outcome.error.message },
          'KV transfer failed',
        );
      h.link.end({ kind: 'failed', error: endError(outcome.error) });
      this.drainQueue();
      return;
    }
    const { request } = h;
    const first = outcome.firstToken;
    if (!Number.isInteger(first.id) || first.id < 0 || first.id >= this.options.vocabSize) {
      this.drop(h);
      h.link.end({
        kind: 'failed',
        error: new KvfenceError('kv_transfer_failed', 'the first token is outside the vocabulary'),
      });
      this.drainQueue();
      return;
    }
    const transfer = h.transfer!;
    const extraTable = this.options.loop.pool.acquire(h.extra!);
    transfer.table.pages.push(...extraTable.pages);
    transfer.table.epochs.push(...extraTable.epochs);
    const prompt = request.promptTokens.length;
    if (this.options.isStopToken(first.id)) {
      this.finishEarly(h, { kind: 'finished', reason: 'stop', promptTokens: prompt, completionTokens: 0 });
      return;
    }
    h.link.token({
      id: first.id,
      logprob: first.logprob,
      top: first.top.map((t) => ({ id: t.id, logprob: t.logprob })),
    });
    if (request.maxTokens === 1) {
      this.finishEarly(h, { kind: 'finished', reason: 'length', promptTokens: prompt, completionTokens: 1 });
      return;
    }
    h.phase = 'decoding';
    try {
      this.options.loop.adopt(
        {
          request,
          table: transfer.table,
          reservation: transfer.reservation,
          extraReservation: h.extra!,
          first: first.id,
        },
        {
          onToken: (token) => h.link.token(token),
          onEnd: (end) => {
            if (this.held.get(request.id) === h) this.held.delete(request.id);
            h.link.end(end);
            queueMicrotask(() => this.drainQueue());
          },
        },
      );
    } catch (error) {
      h.phase = 'transferring'; // not adopted: its pages are still ours to release
      this.drop(h);
      h.link.end({
        kind: 'failed',
        error: error instanceof KvfenceError ? error : new KvfenceError('internal_error', errorMessage(error)),
      });
      this.drainQueue();
    }
  }

  private finishEarly(h: Held, end: GenerationEnd): void {
    this.drop(h);
    h.link.end(end);
    this.drainQueue();
  }

  /** Forgets a request and gives back every page it holds (scrubbed), whatever its phase. */
  private drop(h: Held): void {
    if (this.held.get(h.request.id) === h) this.held.delete(h.request.id);
    switch (h.phase) {
      case 'queued': {
        h.cancelWait?.();
        const i = this.queue.indexOf(h);
        if (i >= 0) this.queue.splice(i, 1);
        break;
      }
      case 'transferring': {
        const pool = this.options.loop.pool;
        h.handle?.cancel('cancelled'); // scrubs the prompt pages (no effect once terminal)
        if (h.transfer !== undefined) pool.release(h.transfer.reservation);
        if (h.extra !== undefined) pool.release(h.extra);
        break;
      }
      case 'decoding':
        this.options.loop.cancel(h.request.id); // the engine releases both reservations
        break;
    }
  }

  private count(phase: Held['phase']): number {
    let n = 0;
    for (const h of this.held.values()) if (h.phase === phase) n++;
    return n;
  }
}

/**
 * A prefill's ABORT keeps its original code (a 400 stays a 400, DESIGN §6); every other transfer failure is a 500
 * kv_transfer_failed that names only the reason.
 */
function endError(error: TransferError): KvfenceError {
  const peer = error.peerCode;
  if (error.reason === 'sender_aborted' && peer !== undefined && isErrorCode(peer) && peer !== 'kv_transfer_failed') {
    return new KvfenceError(peer, error.message.replace(/^KV transfer failed \(sender_aborted\): /, ''));
  }
  return publicTransferError(error);
}

/**
 * What a client may learn of a transfer failure: its reason, nothing more. Frame-level details (a replayed frame names
 * the request it came from, possibly another tenant's) stay in the worker's log.
 */
export function publicTransferError(error: KvfenceError): KvfenceError {
  if (!(error instanceof TransferError)) return error;
  return new KvfenceError(
    'kv_transfer_failed',
    `KV transfer failed (${error.reason}); the request's pages were scrubbed`,
  );
}
