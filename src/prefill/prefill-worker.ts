/**
 * The prefill worker (DESIGN §1, §3 steps 2–3): computes a job's prompt KV in chunks in its own pool, samples the first
 * token with the request's sampler, pushes HELLO · PAGE… · COMMIT to the decode worker named in the job over an
 * authenticated connection, and then frees and scrubs its pages. A job it cannot serve (its own I2 re-check, a prompt
 * its pool can never hold) ends with an error to the gateway with the original code, and an ABORT to the decode side.
 *
 *   job ──▶ computing (PrefillEngine, bounded wait for pages) ──▶ sending (TransferSender) ──▶ prefilled | end(failed)
 *
 * The sender reads each page through a private copy, so the pool's pages can be released the moment the send settles
 * without a socket still holding a view of them (a freed page is never on the wire).
 */

import type { PoolStats } from '../cluster/control-protocol.js';
import { poolStats } from '../cluster/pool-stats.js';
import { publicTransferError } from '../decode/decode-worker.js';
import type { LogSink } from '../engine/inference-worker.js';
import type { PrefillEngine, PrefillEvent, Prefilled } from '../engine/prefill-engine.js';
import type { GenerationEnd, GenerationRequest, IsolationIncident } from '../engine/request.js';
import type { PagePool } from '../kv/page-pool.js';
import { type ByteFaultPlan, FaultyFrameChannel, type FrameFault } from '../transfer/fault-injection.js';
import type { KvPageSource } from '../transfer/kv-page-port.js';
import type { PageChecksum } from '../transfer/page-checksum.js';
import { tableTransferSource } from '../transfer/pool-adapter.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { TransferSender } from '../transfer/transfer-sender.js';
import type { Clock } from '../util/clock.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import type { TransferTransport } from '../wire/transport.js';

export interface PrefillRequestLink {
  /** the connection the job came by: `cancelAll(origin)` when it closes */
  readonly origin: object;
  prefilled(): void;
  end(end: GenerationEnd): void;
}

/**
 * Tests only (KVFENCE_TEST_TRANSFER_FAULTS, inert unless set, see test-faults.ts): the transfers of a tenant's jobs
 * suffer these faults. A `replay` fault replays the frames of the previous transfer this worker sent.
 */
export interface TenantFaults {
  frames: readonly FrameFault[];
  bytes: ByteFaultPlan | undefined;
}

/** per tenant */
export type TestTransferFaults = ReadonlyMap<string, TenantFaults>;

/** Tests only: a transport whose connections suffer a tenant's byte faults. */
export type FaultTransportFor = (plan: ByteFaultPlan) => TransferTransport;

export interface PrefillWorkerOptions {
  engine: PrefillEngine;
  pool: PagePool;
  transport: TransferTransport;
  /** tests only: faults per tenant, and transports for byte faults below the MAC */
  faults?: TestTransferFaults;
  faultTransport?: FaultTransportFor;
  checksum: PageChecksum;
  clock: Clock;
  transferDeadlineMs: number;
  idleTimeoutMs: number;
  onIncident: (incident: IsolationIncident) => void;
  log: LogSink;
  now?: () => number;
  /** mutation self-test hook: see test/mutants/ (no production caller sets it) */
  mutants?: PrefillWorkerMutants;
}

/** Seeded faults of the mutation self-test (test/mutants/README.md); no production caller sets any. */
export interface PrefillWorkerMutants {
  /**
   * A staging-buffer mix-up: every job stages its pages in one worker-wide area instead of a private copy, so of two
   * overlapping sends the earlier one puts the later job's pages on the wire (with correct hop checksums).
   */
  sharedStaging?: boolean;
}

interface Job {
  readonly request: GenerationRequest;
  readonly ticket: TransferTicket;
  readonly decodeAddress: string;
  readonly link: PrefillRequestLink;
  phase: 'computing' | 'sending';
  sender: TransferSender | undefined;
  cancelled: boolean;
}

export class PrefillWorker {
  private readonly jobs = new Map<string, Job>();
  private scheduled: NodeJS.Immediate | undefined;
  private closed = false;
  private readonly now: () => number;
  /** tests only: the frames of the last transfer, for `replay` faults */
  private lastRecord: readonly Uint8Array[] = [];
  /** mutation self-test hook: see test/mutants/ (the one staging area of the `sharedStaging` fault, page by index) */
  private readonly sharedStaging: Uint8Array[] = [];

  constructor(private readonly options: PrefillWorkerOptions) {
    this.now = options.now ?? Date.now;
  }

  get provenContext(): number {
    return this.options.engine.config.provenContext;
  }

  job(request: GenerationRequest, ticket: TransferTicket, decodeAddress: string, link: PrefillRequestLink): void {
    if (this.closed || this.jobs.has(request.id)) {
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
    const job: Job = { request, ticket, decodeAddress, link, phase: 'computing', sender: undefined, cancelled: false };
    try {
      if (mismatch !== undefined)
        throw new KvfenceError('kv_transfer_failed', `the ticket does not fit this job: ${mismatch}`);
      this.options.engine.submit(request, this.now());
    } catch (error) {
      const e = error instanceof KvfenceError ? error : new KvfenceError('internal_error', errorMessage(error));
      link.end({ kind: 'failed', error: e });
      if (mismatch === undefined) void this.abortAtDecode(job, e);
      return;
    }
    this.jobs.set(request.id, job);
    this.schedule();
  }

  /** The gateway cancels: computing → pages freed now; sending → ABORT, pages freed when the send settles. */
  cancel(requestId: string): void {
    const job = this.jobs.get(requestId);
    if (job === undefined) return;
    job.cancelled = true;
    if (job.phase === 'computing') {
      this.jobs.delete(requestId);
      this.options.engine.cancel(requestId);
    } else {
      job.sender?.abort('request_cancelled', 'the request was cancelled');
    }
  }

  cancelAll(origin: object): void {
    for (const job of [...this.jobs.values()]) if (job.link.origin === origin) this.cancel(job.request.id);
  }

  /** Pool and queue counts for the gateway's stats. */
  stats(): PoolStats {
    const { pool, engine } = this.options;
    const tenants = [...this.jobs.values()].map((job) => job.request.tenant);
    return poolStats(pool, tenants, this.jobs.size - engine.waitingCount, engine.waitingCount);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.scheduled !== undefined) clearImmediate(this.scheduled);
    this.deliver(
      this.options.engine.abortAll(new KvfenceError('worker_unavailable', 'the prefill worker is shutting down')),
    );
    for (const job of this.jobs.values())
      job.sender?.abort('worker_unavailable', 'the prefill worker is shutting down');
  }

  private schedule(): void {
    if (this.scheduled !== undefined || this.closed || !this.options.engine.hasWork) return;
    this.scheduled = setImmediate(() => {
      this.scheduled = undefined;
      if (this.closed) return;
      this.deliver(this.options.engine.step(this.now()));
      this.schedule();
    });
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
    const { pool } = this.options;
    const job = this.jobs.get(prefilled.request.id);
    if (job === undefined || job.cancelled) {
      pool.release(prefilled.reservation);
      return;
    }
    job.phase = 'sending';
    try {
      const { checksum } = this.options;
      const pages = tableTransferSource(pool, prefilled.table, prefilled.request.promptTokens.length, checksum);
      const shared = this.options.mutants?.sharedStaging === true; // mutation self-test hook: see test/mutants/
      const source = shared ? stagedSource(pages, this.sharedStaging) : copyingSource(pages);
      const channel = await this.connect(job);
      const sender = this.newSender(channel, job.ticket);
      job.sender = sender;
      if (job.cancelled) sender.abort('request_cancelled', 'the request was cancelled');
      await sender.send(source, prefilled.first);
      if (channel instanceof FaultyFrameChannel) this.lastRecord = channel.record;
      job.link.prefilled();
    } catch (error) {
      const e = error instanceof KvfenceError ? error : new KvfenceError('kv_transfer_failed', errorMessage(error));
      if (!job.cancelled) {
        this.options.log.warn(
          { request: job.request.id, tenant: job.request.tenant, err: e.message },
          'KV transfer failed',
        );
        job.link.end({ kind: 'failed', error: publicTransferError(e) });
      }
    } finally {
      pool.release(prefilled.reservation);
      this.jobs.delete(job.request.id);
    }
  }

  private async connect(job: Job): Promise<FrameChannel> {
    const faults = this.options.faults;
    if (faults === undefined) return this.options.transport.connect(job.decodeAddress);
    const plan = faults.get(job.request.tenant);
    const transport =
      plan?.bytes !== undefined && this.options.faultTransport !== undefined
        ? this.options.faultTransport(plan.bytes)
        : this.options.transport;
    const channel = await transport.connect(job.decodeAddress);
    const frames = (plan?.frames ?? []).map((f) => (f.kind === 'replay' ? { ...f, recorded: this.lastRecord } : f));
    return new FaultyFrameChannel(channel, frames);
  }

  private newSender(channel: FrameChannel, ticket: TransferTicket): TransferSender {
    const { checksum, clock, transferDeadlineMs, idleTimeoutMs } = this.options;
    return new TransferSender(channel, ticket, { checksum, clock, deadlineMs: transferDeadlineMs, idleTimeoutMs });
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
  if (ticket.pageBytes !== pool.layout.floatsPerPage * 4)
    return `page bytes ${ticket.pageBytes}, here ${pool.layout.floatsPerPage * 4}`;
  return undefined;
}

/** Each page read through a private copy (see the file comment); the checksums sealed on the pool's pages go along. */
function copyingSource(source: KvPageSource): KvPageSource {
  const { pageCount, pageBytes, checksums } = source;
  return { pageCount, pageBytes, checksums, pageView: (index) => source.pageView(index).slice() };
}

/**
 * mutation self-test hook: see test/mutants/ (the `sharedStaging` fault). Stages every page now, into `staging`
 * (shared by all jobs, grown as needed), and reads it back at send time: whatever job staged last is what goes out.
 */
function stagedSource(source: KvPageSource, staging: Uint8Array[]): KvPageSource {
  for (let index = 0; index < source.pageCount; index++) {
    if (staging[index]?.byteLength !== source.pageBytes) staging[index] = new Uint8Array(source.pageBytes);
    staging[index]!.set(source.pageView(index));
  }
  const { pageCount, pageBytes, checksums } = source;
  return { pageCount, pageBytes, checksums, pageView: (index) => staging[index]!.slice() };
}
