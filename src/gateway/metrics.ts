/**
 * Prometheus metrics (prom-client, on registries of our own: no global state). Names follow vLLM where vLLM has the
 * metric, so existing dashboards work; kvfence's own (tenant pages, isolation incidents, pool pages) are `kvfence_*`.
 *
 * Two registries: `registry` holds the aggregate series, public like /metrics; `tenantRegistry` holds the series that
 * would let anyone watch another tenant's activity — every one labelled with a tenant's name (kvfence_tenant_*,
 * kvfence_requests_total, kvfence_isolation_incidents_total), and kvfence_kv_pages_reused, which counts each prefix
 * cache hit as it happens (a tenant polling it would see another's hits): /metrics serves them only to the admin
 * token (`full`).
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { InferenceWorker, WorkerStatus } from '../engine/inference-worker.js';

export type RequestOutcome = 'completed' | 'rejected' | 'failed' | 'cancelled';

const LATENCY_BUCKETS_S = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly tenantRegistry = new Registry();
  /** both registries: what the admin token sees */
  readonly full: Registry;
  readonly promptTokens: Counter<'model_name'>;
  readonly generationTokens: Counter<'model_name'>;
  readonly timeToFirstToken: Histogram<'model_name'>;
  readonly interTokenLatency: Histogram<'model_name'>;
  readonly requestLatency: Histogram<'model_name'>;
  readonly requestSuccess: Counter<'model_name' | 'finished_reason'>;
  readonly requests: Counter<'tenant' | 'outcome'>;
  readonly isolationIncidents: Counter<'tenant'>;

  constructor(
    worker: InferenceWorker,
    readonly modelName: string,
    knownTenants: readonly string[],
    /** requests waiting in the gateway for their tenant's page quota (tenant-gate.ts) */
    waitingAtGateway: () => number,
    /** connections that have not authenticated yet (connection-guard.ts) */
    unauthenticatedConnections: () => number,
  ) {
    const registers = [this.registry];
    const tenantRegisters = [this.tenantRegistry];
    const labels = ['model_name'] as const;
    const gauge = (name: string, help: string, read: () => number, where = registers) =>
      new Gauge({
        name,
        help,
        labelNames: labels,
        registers: where,
        collect() {
          this.set({ model_name: modelName }, read());
        },
      });
    gauge(
      'vllm:num_requests_running',
      'Requests admitted: in the running batch, or paused with their pages held.',
      () => worker.stats().running,
    );
    gauge(
      'vllm:num_requests_waiting',
      "Requests waiting for admission (the workers' queues and the tenant quotas).",
      () => worker.stats().waiting + waitingAtGateway(),
    );
    gauge('vllm:kv_cache_usage_perc', 'KV pool usage, 0 to 1 (reserved or written pages / all pages).', () => {
      const s = worker.stats();
      return (s.pagesTotal - s.pagesFree) / s.pagesTotal;
    });
    gauge('kvfence_kv_pages_total', 'KV pages in the pool.', () => worker.stats().pagesTotal);
    gauge('kvfence_kv_pages_free', 'Free KV pages (scrubbed, unowned).', () => worker.stats().pagesFree);
    gauge(
      'kvfence_kv_pages_cached',
      "KV pages held by the tenants' prefix caches (evicted when admission needs them).",
      () => worker.stats().pagesCached ?? 0,
    );
    gauge(
      'kvfence_kv_pages_reused',
      "KV pages read from the tenants' prefix caches instead of computed, since the workers started.",
      () => worker.stats().pagesReused ?? 0,
      tenantRegisters,
    );
    new Gauge({
      name: 'kvfence_http_unauthenticated_connections',
      help: 'HTTP connections that have not yet sent an authenticated request.',
      registers,
      collect() {
        this.set(unauthenticatedConnections());
      },
    });
    const workers = worker.workers?.bind(worker);
    if (workers !== undefined) {
      const perWorker = (name: string, help: string, read: (w: WorkerStatus) => number | undefined) =>
        new Gauge({
          name,
          help,
          labelNames: ['worker', 'role'],
          registers,
          collect() {
            this.reset();
            for (const w of workers()) {
              const value = read(w);
              if (value !== undefined) this.set({ worker: w.name, role: w.role }, value);
            }
          },
        });
      perWorker('kvfence_worker_up', 'A prefill or decode worker is connected (1) or not (0).', (w) => (w.up ? 1 : 0));
      perWorker('kvfence_worker_kv_pages_free', "Free KV pages of each worker's pool.", (w) => w.pagesFree);
      perWorker('kvfence_worker_kv_pages_total', "KV pages of each worker's pool.", (w) => w.pagesTotal);
    }
    new Gauge({
      name: 'kvfence_tenant_kv_pages',
      help: 'KV pages held by each tenant.',
      labelNames: ['tenant'],
      registers: tenantRegisters,
      collect() {
        this.reset();
        const tenants = worker.stats().tenants;
        for (const tenant of knownTenants) this.set({ tenant }, tenants.get(tenant)?.pages ?? 0);
        for (const [tenant, t] of tenants) this.set({ tenant }, t.pages);
      },
    });
    new Gauge({
      name: 'kvfence_tenant_requests_in_flight',
      help: 'Waiting + running requests of each tenant.',
      labelNames: ['tenant'],
      registers: tenantRegisters,
      collect() {
        this.reset();
        const tenants = worker.stats().tenants;
        for (const tenant of knownTenants) this.set({ tenant }, tenants.get(tenant)?.requests ?? 0);
        for (const [tenant, t] of tenants) this.set({ tenant }, t.requests);
      },
    });
    this.promptTokens = new Counter({
      name: 'vllm:prompt_tokens_total',
      help: 'Prompt tokens of completed requests.',
      labelNames: labels,
      registers,
    });
    this.generationTokens = new Counter({
      name: 'vllm:generation_tokens_total',
      help: 'Generated tokens.',
      labelNames: labels,
      registers,
    });
    this.timeToFirstToken = new Histogram({
      name: 'vllm:time_to_first_token_seconds',
      help: 'Time from arrival to the first token.',
      labelNames: labels,
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.interTokenLatency = new Histogram({
      name: 'vllm:inter_token_latency_seconds',
      help: 'Time between consecutive tokens of a request.',
      labelNames: labels,
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.requestLatency = new Histogram({
      name: 'vllm:e2e_request_latency_seconds',
      help: 'Time from arrival to the last token.',
      labelNames: labels,
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.requestSuccess = new Counter({
      name: 'vllm:request_success_total',
      help: 'Completed requests by finish reason.',
      labelNames: ['model_name', 'finished_reason'],
      registers,
    });
    this.requests = new Counter({
      name: 'kvfence_requests_total',
      help: 'Requests by tenant and how they ended.',
      labelNames: ['tenant', 'outcome'],
      registers: tenantRegisters,
    });
    this.isolationIncidents = new Counter({
      name: 'kvfence_isolation_incidents_total',
      help: 'Failed KV ownership checks (each aborted its request and was recorded).',
      labelNames: ['tenant'],
      registers: tenantRegisters,
    });
    for (const tenant of knownTenants) this.isolationIncidents.inc({ tenant }, 0);
    this.full = Registry.merge([this.registry, this.tenantRegistry]);
    worker.onIncident((incident) => this.isolationIncidents.inc({ tenant: incident.tenant }));
  }
}
