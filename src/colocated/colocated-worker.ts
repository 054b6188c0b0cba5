/**
 * The colocated worker: prefill and decode in one process, sharing one KV pool and one engine. It owns the step loop:
 * while there is work it runs `engine.step()` and hands the returned events out (tokens and endings to the request's
 * sink, incidents to the durable store before the request's failure is delivered), yielding to the event loop between
 * steps so HTTP keeps flowing and cancellations land between steps.
 */
import type { Backend } from '../compute/backend.js';
import { ForwardPass } from '../compute/forward.js';
import { Engine, type EngineMutants, type TransferredSequence } from '../engine/engine.js';
import type { TenantLimits } from '../engine/engine-config.js';
import type { GenerationSink, InferenceWorker, LogSink, WorkerStats } from '../engine/inference-worker.js';
import type { EngineEvent, GenerationRequest, IsolationIncident } from '../engine/request.js';
import type { IncidentStore } from '../incidents/incident-store.js';
import { type CapacityProof, proveCapacity } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { ownerLabel } from '../kv/page-owner.js';
import { PagePool, type PagePoolMutants } from '../kv/page-pool.js';
import { PrefixCache, type PrefixCacheMutants } from '../kv/prefix-cache.js';
import type { LoadedModel } from '../model/load-model.js';
import { errorMessage, KvfenceError } from '../util/errors.js';

export interface TenantLimitTable {
  defaults: TenantLimits;
  /** per-tenant overrides (from the key file) */
  overrides: ReadonlyMap<string, Partial<TenantLimits>>;
}

export function tenantLimitsOf(table: TenantLimitTable, tenant: string): TenantLimits {
  return { ...table.defaults, ...table.overrides.get(tenant) };
}

export interface ColocatedWorkerOptions {
  model: LoadedModel;
  backend: Backend;
  pageSize: number;
  pageCount: number;
  /** an operator's cap on the advertised context (below the model's) */
  contextCap?: number;
  clampContext: boolean;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  prefillChunkTokens: number;
  stepTokenBudget: number;
  tenantLimits: TenantLimitTable;
  incidents: IncidentStore;
  log: LogSink;
  /** pages of prompt KV each tenant's prefix cache may hold (0 or absent: no prefix cache) */
  prefixCachePages?: number;
  /** benchmarks only: no ownership checks, no scrubbing */
  unchecked?: boolean;
  now?: () => number;
  /** mutation self-test hook: see test/mutants/ (seeded isolation faults; `kvfence serve` never sets it) */
  mutants?: { pool?: PagePoolMutants; engine?: EngineMutants; prefixCache?: PrefixCacheMutants };
}

export class ColocatedWorker implements InferenceWorker {
  readonly pool: PagePool;
  readonly engine: Engine;
  readonly capacity: CapacityProof;
  /** the tenants' prefix cache (undefined: none) */
  readonly prefixCache: PrefixCache | undefined;
  private readonly sinks = new Map<string, GenerationSink>();
  private readonly incidentListeners: ((incident: IsolationIncident) => void)[] = [];
  private readonly now: () => number;
  private scheduled: NodeJS.Immediate | undefined;
  private closed = false;
  private paused = false;

  constructor(private readonly options: ColocatedWorkerOptions) {
    const { model, pageSize, pageCount, tenantLimits } = options;
    const c = model.config;
    const tenantPagesMin = Math.min(
      tenantLimits.defaults.kvPagesMax,
      ...[...tenantLimits.overrides.values()].map((o) => o.kvPagesMax ?? Number.POSITIVE_INFINITY),
    );
    this.capacity = proveCapacity({
      modelContext: c.contextLength,
      ...(options.contextCap !== undefined ? { requestedContext: options.contextCap } : {}),
      pageCount,
      pageSize,
      tenantPagesMin,
      clamp: options.clampContext,
    });
    this.pool = new PagePool(makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, pageSize), pageCount, {
      ...(options.unchecked === true ? { unchecked: true } : {}),
      ...(options.mutants?.pool !== undefined ? { mutants: options.mutants.pool } : {}), // mutation self-test hook: see test/mutants/
    });
    const cachePages = options.prefixCachePages ?? 0;
    const prefixCache =
      cachePages > 0 ? new PrefixCache(this.pool, cachePages, options.mutants?.prefixCache) : undefined; // mutation self-test hook: see test/mutants/
    this.prefixCache = prefixCache;
    this.engine = new Engine(
      {
        provenContext: this.capacity.provenContext,
        vocabSize: c.vocabSize,
        runningMax: options.runningMax,
        waitingMax: options.waitingMax,
        queueTimeoutMs: options.queueTimeoutMs,
        prefillChunkTokens: options.prefillChunkTokens,
        stepTokenBudget: options.stepTokenBudget,
        tenantLimits: (tenant) => tenantLimitsOf(tenantLimits, tenant),
        isStopToken: (id) => model.tokenizer.isEndOfGeneration(id),
      },
      new ForwardPass(model, options.backend, this.pool),
      {
        ...(prefixCache !== undefined ? { prefixCache } : {}),
        ...(options.mutants?.engine !== undefined ? { mutants: options.mutants.engine } : {}), // mutation self-test hook: see test/mutants/
      },
    );
    this.now = options.now ?? Date.now;
  }

  get provenContext(): number {
    return this.capacity.provenContext;
  }

  submit(request: GenerationRequest, sink: GenerationSink): void {
    if (this.closed) throw new KvfenceError('server_overloaded', 'the server is shutting down');
    this.engine.submit(request, this.now());
    this.sinks.set(request.id, sink);
    this.schedule();
  }

  /**
   * A decode worker's request whose prompt KV arrived by a verified transfer joins the running batch (see
   * `Engine.adoptTransferred`); throws (nothing taken over) when it cannot.
   */
  adopt(adoption: TransferredSequence, sink: GenerationSink): void {
    if (this.closed) throw new KvfenceError('server_overloaded', 'the server is shutting down');
    this.engine.adoptTransferred(adoption, this.now());
    this.sinks.set(adoption.request.id, sink);
    this.schedule();
  }

  cancel(requestId: string): void {
    this.sinks.delete(requestId);
    this.engine.cancel(requestId);
  }

  stats(): WorkerStats {
    return { ...this.engine.stats(), reservations: this.pool.reservationCount };
  }

  onIncident(listener: (incident: IsolationIncident) => void): void {
    this.incidentListeners.push(listener);
  }

  /** Stops stepping (requests are still accepted and queue up, their deadlines running): maintenance and tests. */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.schedule();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.scheduled !== undefined) {
      clearImmediate(this.scheduled);
      this.scheduled = undefined;
    }
    this.deliver(this.engine.abortAll(new KvfenceError('server_overloaded', 'the server is shutting down')));
  }

  private schedule(): void {
    if (this.scheduled !== undefined || this.closed || this.paused || !this.engine.hasWork) return;
    // With nothing running every queued request can be admitted (I1 covers the pool and each quota), so each
    // scheduled step makes progress: no spinning.
    this.scheduled = setImmediate(() => this.tick());
  }

  private tick(): void {
    this.scheduled = undefined;
    if (this.closed || this.paused) return;
    this.deliver(this.engine.step(this.now()));
    this.schedule();
  }

  private deliver(events: readonly EngineEvent[]): void {
    for (const event of events) {
      switch (event.kind) {
        case 'incident':
          this.recordIncident(event.incident);
          break;
        case 'bug':
          this.options.log.error({ err: event.error }, 'internal error in a model step; its requests failed');
          break;
        case 'token':
          this.toSink(event.request, (sink) => sink.onToken(event.token));
          break;
        case 'end': {
          const sink = this.sinks.get(event.request);
          this.sinks.delete(event.request);
          if (sink !== undefined) this.callSink(event.request, () => sink.onEnd(event.end));
          break;
        }
      }
    }
  }

  /** Durable first (the store write is synchronous), then logs and listeners: the client hears of it after. */
  private recordIncident(incident: IsolationIncident): void {
    const v = incident.violation;
    let id: number | undefined;
    try {
      id = this.options.incidents.record(incident);
    } catch (error) {
      this.options.log.error(
        { tenant: incident.tenant, request: incident.request, err: errorMessage(error) },
        'could not write the incident record',
      );
    }
    this.options.log.error(
      {
        tenant: incident.tenant,
        request: incident.request,
        incident: id,
        page: v.page,
        pageOwner: ownerLabel(v.pageOwner),
        reason: v.reason,
      },
      'KV isolation check failed; request aborted',
    );
    for (const listener of this.incidentListeners) listener(incident);
  }

  private toSink(requestId: string, call: (sink: GenerationSink) => void): void {
    const sink = this.sinks.get(requestId);
    if (sink !== undefined) this.callSink(requestId, () => call(sink));
  }

  /** A sink that throws (a broken socket) cancels its own request only. */
  private callSink(requestId: string, call: () => void): void {
    try {
      call();
    } catch (error) {
      this.options.log.warn(
        { request: requestId, err: errorMessage(error) },
        'delivering to a request failed; cancelling it',
      );
      this.cancel(requestId);
    }
  }
}
