/**
 * The seeded isolation faults of the mutation self-test (README.md), as subclasses of the production components that
 * override the one protected check or step each fault removes. Production code has no switch for any of them: a
 * mutant exists only where a test builds one of these classes and hands it to a worker as one of its parts.
 */
import type { ForwardPass } from '../../src/compute/forward.js';
import { Engine, type EngineOptions } from '../../src/engine/engine.js';
import type { EngineConfig } from '../../src/engine/engine-config.js';
import { ENGINE_PARTS, type EngineParts } from '../../src/engine/engine-parts.js';
import type { EngineEvent } from '../../src/engine/request.js';
import type { Sequence } from '../../src/engine/sequence.js';
import { CompletionRun } from '../../src/gateway/completion-run.js';
import type { KvLayout } from '../../src/kv/kv-layout.js';
import { PagePool } from '../../src/kv/page-pool.js';
import type { PageTable } from '../../src/kv/page-table.js';
import { type CachedPage, PrefixCache } from '../../src/kv/prefix-cache.js';
import type { GatewayParts } from '../../src/launch/open-gateway.js';
import { WORKER_PARTS, type WorkerParts } from '../../src/launch/start-worker.js';
import { PrefillWorker } from '../../src/prefill/prefill-worker.js';
import type { KvPageSink, KvPageSource } from '../../src/transfer/kv-page-port.js';
import { ReceiveSession, type TransferOutcome } from '../../src/transfer/receive-session.js';
import type { TransferTicket } from '../../src/transfer/ticket.js';
import { TransferReceiver, type TransferReceiverOptions } from '../../src/transfer/transfer-receiver.js';
import type { KvfenceError } from '../../src/util/errors.js';

export interface PoolFaults {
  /** (b): no owner, epoch or state check on reads and writes, no scrub on free */
  ownershipUnchecked?: boolean;
  /** (c): reads do not compare the table's epoch with the page's */
  epochUnchecked?: boolean;
  /** (f): a table's shared prefix pages may belong to any tenant's cache (owner, epoch and state still checked) */
  sharedTenantUnchecked?: boolean;
}

export class MutantPagePool extends PagePool {
  constructor(
    layout: KvLayout,
    pageCount: number,
    private readonly faults: PoolFaults,
  ) {
    super(layout, pageCount);
  }

  protected override checkPage(table: PageTable, i: number, tokens: number): void {
    if (this.faults.ownershipUnchecked === true) return;
    const cacheOwner = i < table.sharedPages ? this.ownerOf(table.pages[i]!) : undefined;
    if (this.faults.sharedTenantUnchecked === true && cacheOwner?.shared === true) {
      // checked as if the reader were of the page's tenant: everything but the tenant still holds
      super.checkPage({ ...table, owner: { ...table.owner, tenant: cacheOwner.tenant } }, i, tokens);
    } else super.checkPage(table, i, tokens);
  }

  protected override checkWritable(table: PageTable, i: number): void {
    if (this.faults.ownershipUnchecked !== true) super.checkWritable(table, i);
  }

  protected override scrub(page: number): void {
    if (this.faults.ownershipUnchecked !== true) super.scrub(page);
  }

  protected override checkUntouchedSinceFree(page: number): void {
    if (this.faults.ownershipUnchecked !== true) super.checkUntouchedSinceFree(page);
  }

  protected override epochMatches(page: number, epoch: number): boolean {
    return this.faults.epochUnchecked === true || super.epochMatches(page, epoch);
  }
}

/** (c)'s fault: eviction frees an entry's page but leaves the entry in the index, where a later lookup finds it. */
export class StaleIndexPrefixCache extends PrefixCache {
  protected override unindex(_entry: CachedPage): void {}
}

/** (f)'s fault: the chain keys leave out the tenant, so a prompt cached by one tenant is a hit for every tenant. */
export class TenantlessPrefixCache extends PrefixCache {
  protected override chainSeed(_tenant: string): string {
    return super.chainSeed('');
  }

  protected override hitAllowed(): boolean {
    return true;
  }
}

export interface EngineFaults {
  /** (b): a cancel frees the request's pages but leaves it in the batch, still writing through its old table */
  cancelLeavesRunning?: boolean;
  /** (e): a failed or aborted request ends as finished ('length') with what it generated so far */
  abortAsSuccess?: boolean;
}

export class MutantEngine extends Engine {
  constructor(
    config: EngineConfig,
    forward: ForwardPass,
    options: EngineOptions,
    private readonly faults: EngineFaults,
  ) {
    super(config, forward, options);
  }

  override cancel(requestId: string): boolean {
    const seq = this.find(requestId);
    if (this.faults.cancelLeavesRunning === true && seq !== undefined && seq.state !== 'waiting') {
      if (seq.reservation !== undefined) this.pool.release(seq.reservation);
      return true;
    }
    return super.cancel(requestId);
  }

  protected override fail(seq: Sequence, error: KvfenceError, events: EngineEvent[]): void {
    if (this.faults.abortAsSuccess === true) this.finish(seq, 'length', events);
    else super.fail(seq, error, events);
  }
}

/**
 * (d)'s removed check: I5's page checksum comparison, so a page is stored and counted written whatever its bytes. The
 * COMMIT's digest still matches, since both sides build it from the checksums the PAGEs carried.
 */
export class ChecksumUncheckedReceiver extends TransferReceiver {
  constructor(options: TransferReceiverOptions) {
    super(options);
  }

  protected override newSession(
    ticket: TransferTicket,
    sink: KvPageSink,
    onTerminal: (outcome: TransferOutcome) => void,
  ): ReceiveSession {
    return new ChecksumUncheckedSession(ticket, sink, this.options.checksum, onTerminal);
  }
}

class ChecksumUncheckedSession extends ReceiveSession {
  protected override checksumMatches(): boolean {
    return true;
  }
}

/** (a), the incident: a request over the context is served with a 1-token placeholder prompt instead of a 400. */
export class PlaceholderRun extends CompletionRun {
  protected override async promptAndMaxTokens(): Promise<{ prompt: number[]; maxTokens: number }> {
    const { prompt, maxTokens } = await super.promptAndMaxTokens();
    const { context } = this.ctx;
    if (prompt.length + Math.max(maxTokens, 1) <= context) return { prompt, maxTokens };
    return { prompt: prompt.slice(-1), maxTokens: Math.min(Math.max(maxTokens, 1), context - 1) };
  }
}

/** Every seeded fault of one mutant, by the component it is injected into (README.md). */
export interface SeededFaults {
  placeholder?: boolean;
  pool?: PoolFaults;
  engine?: EngineFaults;
  staleIndex?: boolean;
  /** (f): prefix-cache keys without the tenant */
  tenantlessPrefix?: boolean;
}

/** The parts a colocated server (or a worker) is built from, with `faults` seeded; `{}`: production's parts. */
export function seededParts(faults: SeededFaults): EngineParts & GatewayParts {
  return {
    capacity: ENGINE_PARTS.capacity,
    pool: (layout, pageCount) =>
      faults.pool !== undefined ? new MutantPagePool(layout, pageCount, faults.pool) : new PagePool(layout, pageCount),
    prefixCache: (pool, pages) =>
      faults.staleIndex === true
        ? new StaleIndexPrefixCache(pool, pages)
        : faults.tenantlessPrefix === true
          ? new TenantlessPrefixCache(pool, pages)
          : new PrefixCache(pool, pages),
    engine: (config, forward, options) =>
      faults.engine !== undefined
        ? new MutantEngine(config, forward, options, faults.engine)
        : new Engine(config, forward, options),
    ...(faults.placeholder === true ? { completionRun: PlaceholderRun } : {}),
  };
}

/**
 * (d)'s fault: a staging-buffer mix-up. Every job stages its pages now, in one worker-wide area, and the sender reads
 * them back at send time, so of two overlapping sends the earlier one puts the later job's pages on the wire, under
 * the checksums sealed for its own (which the receiver's page check catches, unless (d) removed it).
 */
export class SharedStagingPrefillWorker extends PrefillWorker {
  private readonly staging: Uint8Array[] = [];

  protected override sendSource(source: KvPageSource): KvPageSource {
    for (let index = 0; index < source.pageCount; index++) {
      if (this.staging[index]?.byteLength !== source.pageBytes) this.staging[index] = new Uint8Array(source.pageBytes);
      this.staging[index]!.set(source.pageView(index));
    }
    const { pageCount, pageBytes, checksums } = source;
    return { pageCount, pageBytes, checksums, pageView: (index) => this.staging[index]!.slice() };
  }
}

/** The faults of the disaggregated mutant (d), each on its own so that the fault alone can be run too. */
export interface ClusterFaults {
  /** the prefill worker's staging mix-up */
  sharedStaging?: boolean;
  /** the decode worker's removed page checksum check */
  checksumUnchecked?: boolean;
}

/** A worker's parts with the cluster faults seeded; `{}`: production's. */
export function seededWorkerParts(faults: ClusterFaults): WorkerParts {
  return {
    ...WORKER_PARTS,
    prefillWorker: (options) =>
      faults.sharedStaging === true ? new SharedStagingPrefillWorker(options) : new PrefillWorker(options),
    receiver: (options) =>
      faults.checksumUnchecked === true ? new ChecksumUncheckedReceiver(options) : new TransferReceiver(options),
  };
}
