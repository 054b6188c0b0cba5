/**
 * The colocated worker: prefill and decode in one process, sharing one KV pool and one engine, run by a BatchRunner
 * (step loop, sinks, incidents). It is the gateway's InferenceWorker in `kvfence serve`.
 */
import type { Backend } from '../compute/backend.js';
import { BatchRunner } from '../engine/batch-runner.js';
import type { Engine } from '../engine/engine.js';
import { ENGINE_PARTS, type EngineParts } from '../engine/engine-parts.js';
import type { GenerationSink, InferenceWorker, WorkerPageMap, WorkerStats } from '../engine/inference-worker.js';
import type { GenerationRequest, IsolationIncident } from '../engine/request.js';
import { engineConfigOf, setUpWorkerKv, type WorkerSettings } from '../engine/worker-kv.js';
import type { IncidentStore } from '../incidents/incident-store.js';
import { recordIncident } from '../incidents/record-incident.js';
import type { CapacityProof } from '../kv/capacity.js';
import { pageMapOf } from '../kv/page-map.js';
import type { PagePool } from '../kv/page-pool.js';
import type { PrefixCache } from '../kv/prefix-cache.js';
import { type LoadedModel, weightsSummary } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';

export interface ColocatedWorkerOptions {
  model: LoadedModel;
  backend: Backend;
  settings: WorkerSettings;
  incidents: IncidentStore;
  log: LogSink;
  now?: () => number;
}

export class ColocatedWorker implements InferenceWorker {
  readonly pool: PagePool;
  readonly capacity: CapacityProof;
  /** the tenants' prefix cache (undefined: none) */
  readonly prefixCache: PrefixCache | undefined;
  readonly runner: BatchRunner;
  private readonly incidentListeners: ((incident: IsolationIncident) => void)[] = [];
  private closed = false;
  private readonly prefixCachePages: number;
  private readonly weightsLine: string;

  constructor(options: ColocatedWorkerOptions, parts: EngineParts = ENGINE_PARTS) {
    const { model, settings } = options;
    const kv = setUpWorkerKv(model, options.backend, settings, parts);
    this.pool = kv.pool;
    this.capacity = kv.capacity;
    this.prefixCache = kv.prefixCache;
    this.prefixCachePages = settings.prefixCachePages;
    this.weightsLine = weightsSummary(model);
    const engine = parts.engine(
      engineConfigOf(model, settings, kv.capacity.provenContext),
      kv.forward,
      kv.prefixCache !== undefined ? { prefixCache: kv.prefixCache } : {},
    );
    this.runner = new BatchRunner({
      engine,
      onIncident: (incident) => {
        recordIncident(options.incidents, options.log, incident);
        for (const listener of this.incidentListeners) listener(incident);
      },
      log: options.log,
      now: options.now ?? Date.now,
    });
  }

  get provenContext(): number {
    return this.capacity.provenContext;
  }

  /**
   * What the operator reads at startup: the weights' memory, the pool's size and its capacity proof, and the prefix
   * cache when on.
   */
  summary(): string[] {
    const { layout, pageCount } = this.pool;
    const mib = (pageCount * layout.bytesPerPage) / 2 ** 20;
    const lines = [
      this.weightsLine,
      `kvfence: KV pool ${pageCount} pages × ${layout.pageSize} tokens (${mib.toFixed(1)} MiB); ${this.capacity.summary}`,
    ];
    if (this.prefixCachePages > 0)
      lines.push(`kvfence: prefix cache on: up to ${this.prefixCachePages} pages a tenant, reused only by that tenant`);
    return lines;
  }

  get engine(): Engine {
    return this.runner.engine;
  }

  get pageSize(): number {
    return this.pool.layout.pageSize;
  }

  submit(request: GenerationRequest, sink: GenerationSink): void {
    if (this.closed) throw new KvfenceError('server_overloaded', 'the server is shutting down');
    this.runner.submit(request, sink);
  }

  cancel(requestId: string): void {
    this.runner.cancel(requestId);
  }

  endChoice(requestId: string, choice: number): void {
    this.runner.endChoice(requestId, choice);
  }

  stats(): WorkerStats {
    return { ...this.runner.engine.stats(), reservations: this.pool.reservationCount };
  }

  /** The dashboard's picture of the one pool (nothing is ever on the wire here). */
  async pageMaps(): Promise<WorkerPageMap[]> {
    const report = { map: pageMapOf(this.pool), transfers: [] };
    return [{ name: 'colocated', role: 'colocated', up: true, report }];
  }

  onIncident(listener: (incident: IsolationIncident) => void): void {
    this.incidentListeners.push(listener);
  }

  /** Stops stepping (requests are still accepted and queue up; queue deadlines are checked once it resumes). */
  pause(): void {
    this.runner.pause();
  }

  resume(): void {
    this.runner.resume();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.runner.close(new KvfenceError('server_overloaded', 'the server is shutting down'));
  }
}
