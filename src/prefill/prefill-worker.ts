/**
 * The prefill worker (DESIGN §1, §3 steps 2–3): computes a job's prompt KV in chunks in its own pool, samples the first
 * token with the request's sampler, pushes HELLO · PAGE… · COMMIT to the decode worker named in the job over an
 * authenticated connection, and then frees and scrubs its pages. A job it cannot serve (its own I2 re-check, a prompt
 * its pool can never hold) ends with an error to the gateway with the original code, and an ABORT to the decode side.
 *
 *   job ──▶ computing (PrefillEngine, bounded wait for pages) ──▶ sending (TransferSender) ──▶ prefilled | end(failed)
 *
 * The sender reads the pool's pages where they lie: the channel seals each frame into a buffer of its own before `send`
 * returns (FrameChannel), so once the send settles nothing holds a view of a page, and the pages are released then (a
 * freed page is never on the wire). Until 2026-12-05 each page went through a private copy first, which cost the
 * sender 1.1–1.4× its CPU on node 20 and 1.8–2.1× on node 24 (docs/protocol.md §8).
 */

import type { PoolStats } from '../cluster/control-protocol.js';
import { poolStats } from '../cluster/pool-stats.js';
import { GrammarWaits } from '../engine/grammar-waits.js';
import type { PrefillEngine, PrefillEvent, Prefilled } from '../engine/prefill-engine.js';
import type { GenerationEnd, GenerationRequest, IsolationIncident } from '../engine/request.js';
import { StepLoop } from '../engine/step-loop.js';
import { KvIsolationError } from '../kv/isolation-error.js';
import { type PageMapReport, pageMapOf } from '../kv/page-map.js';
import type { PagePool } from '../kv/page-pool.js';
import type { PrefixCache } from '../kv/prefix-cache.js';
import type { KvPageSource } from '../transfer/kv-page-port.js';
import type { PageChecksum } from '../transfer/page-checksum.js';
import { tableTransferSource } from '../transfer/pool-adapter.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { publicTransferError } from '../transfer/transfer-error.js';
import { TransferSender } from '../transfer/transfer-sender.js';
import type { Clock } from '../util/clock.js';
import { asKvfenceError, errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import type { TransferTransport } from '../wire/transport.js';

export interface PrefillRequestLink {
  /** the connection the job came by: `cancelAll(origin)` when it closes */
  readonly origin: object;
  prefilled(): void;
  end(end: GenerationEnd): void;
}

export interface PrefillWorkerOptions {
  engine: PrefillEngine;
  pool: PagePool;
  prefixCache: PrefixCache | undefined;
  /** connections to decode workers' transfer listeners */
  transport: TransferTransport;
  checksum: PageChecksum;
  clock: Clock;
  transferDeadlineMs: number;
  idleTimeoutMs: number;
  onIncident: (incident: IsolationIncident) => void;
  log: LogSink;
  now?: () => number;
}

type JobState = { readonly name: 'computing' } | { readonly name: 'sending'; sender: TransferSender | undefined };

interface Job {
  readonly request: GenerationRequest;
  readonly ticket: TransferTicket;
  readonly decodeAddress: string;
  readonly link: PrefillRequestLink;
  state: JobState;
  cancelled: boolean;
}

export class PrefillWorker {
  private readonly jobs = new Map<string, Job>();
  private readonly waits: GrammarWaits;
  private readonly loop: StepLoop<PrefillEvent>;
  private closed = false;
  private readonly now: () => number;

  constructor(private readonly options: PrefillWorkerOptions) {
    this.now = options.now ?? Date.now;
    this.waits = new GrammarWaits(options.engine.config.grammars, options.engine.config.queueTimeoutMs);
    this.loop = new StepLoop(options.engine, (events) => this.deliver(events), this.now);
  }

  get provenContext(): number {
    return this.options.engine.config.provenContext;
  }

  job(request: GenerationRequest, ticket: TransferTicket, decodeAddress: string, link: PrefillRequestLink): void {
    if (this.closed || this.jobs.has(request.id) || this.waits.has(request.id)) {
      const why = this.closed
        ? 'the prefill worker is shutting down'
        : `request id ${request.id} is already in use here`;
      link.end({
        kind: 'failed',
        error: new KvfenceError(this.closed ? 'worker_unavailable' : 'invalid_argument', why),
      });
      return;
    }
    const mismatch = ticketMismatch(request, ticket, this.options.pool);
    const job: Job = { request, ticket, decodeAddress, link, state: { name: 'computing' }, cancelled: false };
    const failed = (error: KvfenceError) => {
      link.end({ kind: 'failed', error });
      if (mismatch === undefined) void this.abortAtDecode(job, error);
    };
    try {
      if (mismatch !== undefined)
        throw new KvfenceError('kv_transfer_failed', `the ticket does not fit this job: ${mismatch}`);
      // its output grammar is built off this thread, where the engine steps (GrammarWaits), before it is computed
      this.waits.whenReady(
        request,
        () => {
          this.options.engine.submit(request, this.now());
          this.jobs.set(request.id, job);
          this.loop.kick();
        },
        failed,
        link.origin,
      );
    } catch (error) {
      failed(asKvfenceError(error));
    }
  }

  /** The gateway cancels: computing → pages freed now; sending → ABORT, pages freed when the send settles. */
  cancel(requestId: string): void {
    if (this.waits.withdraw(requestId)) return;
    const job = this.jobs.get(requestId);
    if (job === undefined) return;
    job.cancelled = true;
    if (job.state.name === 'computing') {
      this.jobs.delete(requestId);
      this.options.engine.cancel(requestId);
      this.loop.kick(); // its pages are free: a queued job may fit now
    } else {
      job.state.sender?.abort('request_cancelled', 'the request was cancelled');
    }
  }

  cancelAll(origin: object): void {
    this.waits.withdrawFrom(origin);
    for (const job of [...this.jobs.values()]) if (job.link.origin === origin) this.cancel(job.request.id);
  }

  /** Pool and queue counts for the gateway's stats. */
  stats(): PoolStats {
    const { pool, engine, prefixCache } = this.options;
    const tenants = [...this.jobs.values()].map((job) => job.request.tenant);
    const stats = poolStats(pool, tenants, this.jobs.size - engine.waitingCount, engine.waitingCount);
    return prefixCache === undefined ? stats : { ...stats, ...prefixCache.stats() };
  }

  /** The dashboard's picture of the pool: a job's pages show as on the wire while they are sent (decode reports progress). */
  pageMapReport(): PageMapReport {
    const sending = (request: string) => this.jobs.get(request)?.state.name === 'sending';
    return { map: pageMapOf(this.options.pool, sending), transfers: [] };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.loop.stop();
    const error = new KvfenceError('worker_unavailable', 'the prefill worker is shutting down');
    this.waits.failAll(error);
    void this.options.engine.config.grammars?.close();
    this.deliver(this.options.engine.abortAll(error));
    for (const job of this.jobs.values())
      if (job.state.name === 'sending')
        job.state.sender?.abort('worker_unavailable', 'the prefill worker is shutting down');
  }

  /**
   * The pages as the sender reads them: the pool's own, with the checksums sealed on them (see the file comment). A
   * seam only for the mutation self-test (test/mutants/), whose seeded fault stages every job's pages in one shared area.
   */
  protected sendSource(pages: KvPageSource): KvPageSource {
    return pages;
  }

  private deliver(events: readonly PrefillEvent[]): void {
    for (const event of events) {
      switch (event.kind) {
        case 'incident':
          this.options.onIncident(event.incident);
          break;
        case 'failed': {
          const job = this.jobs.get(event.request);
          this.jobs.delete(event.request);
          if (job === undefined) break;
          job.link.end({ kind: 'failed', error: event.error });
          void this.abortAtDecode(job, event.error);
          break;
        }
        case 'prefilled':
          void this.send(event.prefilled);
          break;
      }
    }
  }

  /** Step 3: push the pages and the COMMIT; the pages are released (scrubbed) however it ends. */
  private async send(prefilled: Prefilled): Promise<void> {
    const job = this.jobs.get(prefilled.request.id);
    if (job === undefined || job.cancelled) {
      this.release(prefilled);
      return;
    }
    const state: JobState = { name: 'sending', sender: undefined };
    job.state = state;
    try {
      const pages = this.sealedPages(job, prefilled);
      if (pages === undefined) return;
      const source = this.sendSource(pages);
      const channel = await this.options.transport.connect(job.decodeAddress);
      const sender = this.newSender(channel, job.ticket);
      state.sender = sender;
      if (job.cancelled) sender.abort('request_cancelled', 'the request was cancelled');
      await sender.send(source, prefilled.firsts);
      job.link.prefilled();
    } catch (error) {
      const e = asKvfenceError(error, 'kv_transfer_failed');
      if (!job.cancelled) {
        this.options.log.warn(
          { request: job.request.id, tenant: job.request.tenant, err: e.message },
          'KV transfer failed',
        );
        job.link.end({ kind: 'failed', error: publicTransferError(e) });
      }
    } finally {
      this.release(prefilled);
      this.jobs.delete(job.request.id);
    }
  }

  /**
   * The job's pages as a transfer source, checked readable by it (I3) and sealed with their checksums; undefined when
   * the check fails: an incident, the job failed as the engine fails one (never as a transfer error), and an ABORT
   * so that the decode side frees its reservation now.
   */
  private sealedPages(job: Job, prefilled: Prefilled): KvPageSource | undefined {
    const { pool, checksum } = this.options;
    try {
      return tableTransferSource(pool, prefilled.table, prefilled.request.promptTokens.length, checksum);
    } catch (error) {
      if (!(error instanceof KvIsolationError)) throw error;
      const { id, tenant } = job.request;
      this.options.onIncident({ request: id, tenant, violation: error.violation, timeMs: this.now() });
      const failed = new KvfenceError('kv_isolation_violation', 'KV isolation check failed at prefill');
      job.link.end({ kind: 'failed', error: failed });
      void this.abortAtDecode(job, failed);
      return undefined;
    }
  }

  /** A finished job's pages go back (scrubbed), and a job queued for pages may fit now. */
  private release(prefilled: Prefilled): void {
    prefilled.release();
    this.loop.kick();
  }

  private newSender(channel: FrameChannel, ticket: TransferTicket): TransferSender {
    const { clock, transferDeadlineMs, idleTimeoutMs } = this.options;
    return new TransferSender(channel, ticket, { clock, deadlineMs: transferDeadlineMs, idleTimeoutMs });
  }

  /** Best effort: tell the decode side this job will not come, so its reservation ends now rather than at its deadline. */
  private async abortAtDecode(job: Job, error: KvfenceError): Promise<void> {
    try {
      const channel = await this.options.transport.connect(job.decodeAddress);
      this.newSender(channel, job.ticket).abort(error.code, error.message.slice(0, 512));
    } catch (e) {
      this.options.log.warn(
        { request: job.request.id, err: errorMessage(e) },
        'could not send ABORT to the decode worker',
      );
    }
  }
}

function ticketMismatch(request: GenerationRequest, ticket: TransferTicket, pool: PagePool): string | undefined {
  if (ticket.request !== request.id || ticket.tenant !== request.tenant) return 'another request or tenant';
  if (ticket.tokenCount !== request.promptTokens.length)
    return `${ticket.tokenCount} tokens for a ${request.promptTokens.length}-token prompt`;
  if (ticket.pageSizeTokens !== pool.layout.pageSize)
    return `page size ${ticket.pageSizeTokens}, here ${pool.layout.pageSize}`;
  if (ticket.pageBytes !== pool.layout.bytesPerPage)
    return `page bytes ${ticket.pageBytes}, here ${pool.layout.bytesPerPage}`;
  return undefined;
}
