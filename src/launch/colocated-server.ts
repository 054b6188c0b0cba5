/**
 * `kvfence serve`: the colocated server, gateway and one worker with its KV pool in one process. The capacity proof
 * (I1, the pool's and the tenant quotas') runs before the port opens, and its result is printed.
 *
 * `startThreadedServer` (what the CLI runs) puts the worker on its own thread (colocated/engine-thread.ts), so model
 * steps and the gateway's HTTP, SSE and tokenization never wait for each other (I11). `startServer` keeps it on the
 * event loop's thread: `--engine-thread off` for profiling in one thread, and the tests that reach into the engine or
 * seed faults into its parts.
 */
import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import { ColocatedWorker } from '../colocated/colocated-worker.js';
import { EngineThread } from '../colocated/engine-thread.js';
import { selectBackend } from '../compute/select-backend.js';
import { ENGINE_PARTS, type EngineParts } from '../engine/engine-parts.js';
import type { InferenceWorker } from '../engine/inference-worker.js';
import { servedModel } from '../gateway/served-model.js';
import type { Gateway } from '../gateway/server.js';
import type { TenantDirectory } from '../gateway/tenants.js';
import { IncidentStore } from '../incidents/incident-store.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel, loadModelHead, type ModelHead } from '../model/load-model.js';
import { closeHttpCutting, drainHttp } from './drain-http.js';
import { type GatewayParts, openGateway } from './open-gateway.js';
import { resolvePageCount, SERVE_DEFAULTS, type ServeConfig, workerSettingsOf } from './serve-config.js';

export interface RunningServer<W extends InferenceWorker = ColocatedWorker> {
  url: string;
  gateway: Gateway;
  worker: W;
  tenants: TenantDirectory;
  incidents: IncidentStore;
  devMode: boolean;
  reloadKeys(): string;
  /** SIGTERM: readiness 503 at once, the requests in flight end (at most `deadlineMs`, then 503), then close */
  drain(deadlineMs: number): Promise<void>;
  close(): Promise<void>;
}

/** Loading a model file and proving its pool's capacity on the engine thread must end within this. */
const ENGINE_START_TIMEOUT_MS = 600_000;
/** /health, /metrics and the dashboard wait at most this for the engine thread's stats and page maps */
const ENGINE_ASK_TIMEOUT_MS = 2_000;

/** The worker in this thread. `parts`: what the engine is built from (tests of seeded faults hand in their own). */
export async function startServer(
  config: ServeConfig,
  announce: (line: string) => void = () => {},
  parts: EngineParts & GatewayParts = ENGINE_PARTS,
): Promise<RunningServer> {
  const model = loadModel(config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL), {
    widenQ5_0: config.widenQ5_0,
  });
  const pageCount = resolvePageCount(model, config.pageSize, config.kvPages, config.kvMemory);
  const logger = pino({ level: config.logLevel });
  const incidents = new IncidentStore(config.incidentsDb);
  let worker: ColocatedWorker;
  try {
    worker = new ColocatedWorker(
      {
        model,
        backend: selectBackend(config.backend ?? 'auto', announce, { q8Activations: config.q8Activations }),
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
  for (const line of worker.summary()) announce(line);
  return serveOver(worker, model, config, { logger, incidents, announce, parts });
}

/**
 * The worker on its own thread. `onEngineDown`: the thread died (its requests have failed with 503); the CLI exits so
 * that whatever supervises the process starts it again.
 */
export async function startThreadedServer(
  config: ServeConfig,
  announce: (line: string) => void = () => {},
  onEngineDown: (why: string) => void = () => {},
): Promise<RunningServer<EngineThread>> {
  const modelPath = config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL);
  const model = loadModelHead(modelPath);
  const pageCount = resolvePageCount(model, config.pageSize, config.kvPages, config.kvMemory);
  const logger = pino({ level: config.logLevel });
  const incidents = new IncidentStore(config.incidentsDb);
  let started: Awaited<ReturnType<typeof EngineThread.start>>;
  try {
    started = await EngineThread.start({
      data: {
        modelPath,
        backend: config.backend ?? 'auto',
        widenQ5_0: config.widenQ5_0,
        q8Activations: config.q8Activations,
        settings: workerSettingsOf(config, pageCount),
        incidentsDb: config.incidentsDb,
        logLevel: config.logLevel,
      },
      log: logger,
      startTimeoutMs: ENGINE_START_TIMEOUT_MS,
      askTimeoutMs: ENGINE_ASK_TIMEOUT_MS,
      onDown: onEngineDown,
    });
  } catch (error) {
    incidents.close();
    throw error;
  }
  for (const line of started.lines) announce(line);
  return serveOver(started.worker, model, config, { logger, incidents, announce, parts: {} });
}

/** Opens the gateway over a started worker; closes the worker and the store when that fails. */
async function serveOver<W extends InferenceWorker>(
  worker: W,
  model: ModelHead,
  config: ServeConfig,
  run: {
    logger: FastifyBaseLogger;
    incidents: IncidentStore;
    announce: (line: string) => void;
    parts: GatewayParts;
  },
): Promise<RunningServer<W>> {
  const { incidents, announce } = run;
  const served = servedModel(model, config.modelName ?? model.config.name);
  let open: Awaited<ReturnType<typeof openGateway>>;
  try {
    open = await openGateway(worker, served, gatewaySettingsOf(config), run.logger, announce, run.parts);
  } catch (error) {
    await Promise.all([worker.close(), served.encoder.close()]);
    incidents.close();
    throw error;
  }
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
        () => open.cutConnections(),
        deadlineMs,
      );
      incidents.close();
    },
    async close() {
      open.beginShutdown();
      await worker.close();
      await closeHttpCutting(open.close(), () => open.cutConnections());
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
    ...(config.gateways !== undefined ? { gateways: config.gateways } : {}),
    clampContext: config.clampContext,
    queueTimeoutMs: config.queueTimeoutMs,
    requestTimeoutMs: config.requestTimeoutMs,
    ...(config.http !== undefined ? { http: config.http } : {}),
    ...(config.adminTokenFile !== undefined ? { adminTokenFile: config.adminTokenFile } : {}),
  };
}
