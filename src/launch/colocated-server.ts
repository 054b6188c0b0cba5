/**
 * `kvfence serve`: the colocated server (gateway + one worker with its KV pool, in one process). The capacity proof
 * (I1, the pool's and the tenant quotas') runs before the port opens, and its result is printed.
 */
import { pino } from 'pino';
import { ColocatedWorker } from '../colocated/colocated-worker.js';
import { selectBackend } from '../compute/select-backend.js';
import { ENGINE_PARTS, type EngineParts } from '../engine/engine-parts.js';
import { servedModel } from '../gateway/served-model.js';
import type { Gateway } from '../gateway/server.js';
import type { TenantDirectory } from '../gateway/tenants.js';
import { IncidentStore } from '../incidents/incident-store.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel } from '../model/load-model.js';
import { drainHttp } from './drain-http.js';
import { type GatewayParts, openGateway } from './open-gateway.js';
import { resolvePageCount, SERVE_DEFAULTS, type ServeConfig, workerSettingsOf } from './serve-config.js';

export interface RunningServer {
  url: string;
  gateway: Gateway;
  worker: ColocatedWorker;
  tenants: TenantDirectory;
  incidents: IncidentStore;
  devMode: boolean;
  reloadKeys(): string;
  /** SIGTERM: readiness 503 at once, the requests in flight end (at most `deadlineMs`, then 503), then close */
  drain(deadlineMs: number): Promise<void>;
  close(): Promise<void>;
}

/** `parts`: what the engine is built from (tests of seeded faults hand in their own; production never does). */
export async function startServer(
  config: ServeConfig,
  announce: (line: string) => void = () => {},
  parts: EngineParts & GatewayParts = ENGINE_PARTS,
): Promise<RunningServer> {
  const model = loadModel(config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL));
  const pageCount = resolvePageCount(model, config.pageSize, config.kvPages, config.kvMemory);
  const logger = pino({ level: config.logLevel });
  const incidents = new IncidentStore(config.incidentsDb);
  let worker: ColocatedWorker;
  try {
    worker = new ColocatedWorker(
      {
        model,
        backend: selectBackend(config.backend ?? 'auto', announce),
        settings: workerSettingsOf(config, pageCount),
        incidents,
        log: logger,
        ...(config.now !== undefined ? { now: config.now } : {}),
      },
      parts,
    );
  } catch (error) {
    incidents.close();
    throw error;
  }
  const served = servedModel(model, config.modelName ?? model.config.name);
  let open: Awaited<ReturnType<typeof openGateway>>;
  try {
    open = await openGateway(worker, served, gatewaySettingsOf(config), logger, announce, parts);
  } catch (error) {
    await worker.close();
    incidents.close();
    throw error;
  }
  const pageMiB = (pageCount * worker.pool.layout.floatsPerPage * 4) / 2 ** 20;
  announce(
    `kvfence: KV pool ${pageCount} pages × ${config.pageSize} tokens (${pageMiB.toFixed(1)} MiB); ${worker.capacity.summary}`,
  );
  if ((config.prefixCachePages ?? 0) > 0)
    announce(`kvfence: prefix cache on: up to ${config.prefixCachePages} pages a tenant, reused only by that tenant`);
  announce(`kvfence: incidents are recorded in ${config.incidentsDb}`);
  announce(`kvfence: serving model "${served.id}" (context ${open.context}) on ${open.url}`);
  return {
    url: open.url,
    gateway: open.gateway,
    worker,
    tenants: open.tenants,
    incidents,
    devMode: open.tenants.devMode,
    reloadKeys: () => open.reloadKeys(),
    async drain(deadlineMs: number) {
      open.beginShutdown();
      await drainHttp(
        () => open.close(),
        () => worker.close(),
        deadlineMs,
      );
      incidents.close();
    },
    async close() {
      open.beginShutdown();
      await worker.close();
      await open.close();
      incidents.close();
    },
  };
}

/** The gateway's part of the serve settings. */
export function gatewaySettingsOf(config: ServeConfig) {
  return {
    host: config.host,
    port: config.port,
    ...(config.apiKeysPath !== undefined ? { apiKeysPath: config.apiKeysPath } : {}),
    tenantConcurrentMax: config.tenantConcurrentMax ?? SERVE_DEFAULTS.tenantConcurrentMax,
    ...(config.tenantKvPages !== undefined ? { tenantKvPages: config.tenantKvPages } : {}),
    clampContext: config.clampContext,
    queueTimeoutMs: config.queueTimeoutMs,
    requestTimeoutMs: config.requestTimeoutMs,
    ...(config.http !== undefined ? { http: config.http } : {}),
    ...(config.adminTokenFile !== undefined ? { adminTokenFile: config.adminTokenFile } : {}),
  };
}
