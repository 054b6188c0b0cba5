/**
 * `kvfence serve --disaggregated`: the gateway over N prefill and M decode workers that it starts itself as
 * supervised child processes on loopback, with a fresh cluster secret. Each child gets its typed WorkerConfig (the
 * serve settings, split) in its start message.
 */
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { newClusterSecretText } from '../cluster/cluster-secret.js';
import type { WorkerRole } from '../cluster/control-protocol.js';
import { Supervisor } from '../cluster/supervisor.js';
import { WORKER_DEFAULTS, type WorkerConfig } from '../cluster/worker-config.js';
import type { WorkerSettings } from '../engine/worker-kv.js';
import { AdminToken } from '../gateway/admin-token.js';
import { loadKeyFile } from '../gateway/tenants.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModelHead } from '../model/load-model.js';
import { gatewaySettingsOf } from './colocated-server.js';
import { GATEWAY_DEFAULTS, type RunningGateway, startGateway } from './gateway-server.js';
import { killHungWorkers } from './hung-workers.js';
import type { GatewayParts } from './open-gateway.js';
import { resolvePageCount, type ServeConfig, workerSettingsOf } from './serve-config.js';

export interface ClusterConfig {
  serve: ServeConfig;
  prefillCount: number;
  decodeCount: number;
  /** changes to one role's settings (e.g. a smaller prefill pool) */
  prefillSettings?: Partial<WorkerSettings>;
  decodeSettings?: Partial<WorkerSettings>;
  transferTimeoutMs?: number;
  idleTimeoutMs?: number;
  /** the gateway's bound on a silent worker (GatewayConfig.workerSilenceMs) */
  workerSilenceMs?: number;
  /** the longest a worker may take to load and listen (default SUPERVISOR_DEFAULTS.readyTimeoutMs) */
  workerStartTimeoutMs?: number;
  /** children's stdout shown (a CLI) or dropped (tests) */
  workerStdout: 'inherit' | 'ignore';
  /** tests only: a worker program of their own (one that injects faults) and its arguments */
  workerProgram?: { path: string; args: readonly string[] };
}

export interface ClusterWorker {
  name: string;
  role: WorkerRole;
  control: string;
  transfer?: string;
}

export interface RunningCluster extends RunningGateway {
  supervisor: Supervisor;
  /** the cluster secret the supervisor made (in-process only: tests open control connections with it) */
  secret: Uint8Array;
  workers: ClusterWorker[];
}

/** A worker the gateway has found silent this many silence bounds, its process still running, is killed (hung-workers.ts) */
const HUNG_SILENCES = 3;

export const SUPERVISOR_DEFAULTS = {
  readyTimeoutMs: 60_000,
  restartBackoffMs: 250,
  restartBackoffMaxMs: 30_000,
  restartWindowMs: 60_000,
} as const;

export async function startDisaggregatedServer(
  config: ClusterConfig,
  announce: (line: string) => void = () => {},
  parts: GatewayParts = {},
): Promise<RunningCluster> {
  const { serve } = config;
  // the gateway's own files first: a missing or bad key file or admin token is refused before any worker loads the
  // model (minutes, for a large one), not after; the gateway reads them again when it opens
  if (serve.apiKeysPath !== undefined) loadKeyFile(serve.apiKeysPath);
  if (serve.adminTokenFile !== undefined) AdminToken.fromFile(serve.adminTokenFile);
  const model = loadModelHead(serve.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL));
  const modelName = serve.modelName ?? model.config.name;
  const pageCount = resolvePageCount(model, serve.pageSize, serve.kvPages, serve.kvMemory);
  const secretText = newClusterSecretText();
  const readyTimeoutMs = config.workerStartTimeoutMs ?? SUPERVISOR_DEFAULTS.readyTimeoutMs;
  const log = pino({ level: serve.logLevel });
  const supervisor = new Supervisor({
    program: config.workerProgram?.path ?? fileURLToPath(new URL('./worker-entry.js', import.meta.url)),
    programArgs: config.workerProgram?.args ?? [],
    secretHex: Buffer.from(secretText, 'utf8').toString('hex'),
    ...SUPERVISOR_DEFAULTS,
    readyTimeoutMs,
    stdout: config.workerStdout,
    log,
  });
  const workerConfig = (role: WorkerRole, i: number): WorkerConfig => {
    const name = `${role}-${i}`;
    return {
      role,
      name,
      modelPath: model.path,
      modelName,
      backend: serve.backend ?? 'auto',
      widenQ5_0: serve.widenQ5_0,
      q8Activations: serve.q8Activations,
      settings: {
        ...workerSettingsOf(serve, pageCount),
        ...(role === 'prefill' ? config.prefillSettings : config.decodeSettings),
      },
      controlListen: '127.0.0.1:0',
      ...(role === 'decode' ? { transferListen: '127.0.0.1:0' } : {}),
      transferTimeoutMs: config.transferTimeoutMs ?? WORKER_DEFAULTS.transferTimeoutMs,
      idleTimeoutMs: config.idleTimeoutMs ?? WORKER_DEFAULTS.idleTimeoutMs,
      handshakeTimeoutMs: WORKER_DEFAULTS.handshakeTimeoutMs,
      incidentsDb: serve.incidentsDb.replace(/(\.sqlite)?$/, `-${name}.sqlite`),
      logLevel: serve.logLevel,
      ...(serve.drainTimeoutMs !== undefined ? { drainTimeoutMs: serve.drainTimeoutMs } : {}),
    };
  };
  const configs: WorkerConfig[] = [];
  for (let i = 0; i < config.prefillCount; i++) configs.push(workerConfig('prefill', i));
  for (let i = 0; i < config.decodeCount; i++) configs.push(workerConfig('decode', i));
  try {
    const ready = await Promise.all(configs.map((c) => supervisor.start(c)));
    const workers: ClusterWorker[] = configs.map((c, i) => ({
      name: c.name,
      role: c.role,
      control: ready[i]!.control,
      ...(ready[i]!.transfer !== undefined ? { transfer: ready[i]!.transfer } : {}),
    }));
    for (const w of workers)
      announce(
        `kvfence: ${w.role} worker ${w.name}: control ${w.control}${w.transfer !== undefined ? `, KV transfers ${w.transfer}` : ''}`,
      );
    const secret = new Uint8Array(Buffer.from(secretText, 'utf8'));
    const gateway = await startGateway(
      {
        ...gatewaySettingsOf(serve),
        modelName,
        prefill: workers.filter((w) => w.role === 'prefill').map((w) => w.control),
        decode: workers.filter((w) => w.role === 'decode').map((w) => w.control),
        secret,
        ...(serve.contextCap !== undefined ? { contextCap: serve.contextCap } : {}),
        connectTimeoutMs: readyTimeoutMs,
        ...(config.workerSilenceMs !== undefined ? { workerSilenceMs: config.workerSilenceMs } : {}),
        logLevel: serve.logLevel,
      },
      announce,
      { ...parts, model },
    );
    const silenceMs = config.workerSilenceMs ?? GATEWAY_DEFAULTS.workerSilenceMs;
    const stopWatching = killHungWorkers(
      supervisor,
      () => gateway.dispatcher.workers(),
      HUNG_SILENCES * silenceMs,
      log,
    );
    return {
      ...gateway,
      supervisor,
      secret,
      workers,
      async drain(deadlineMs: number) {
        // a worker that exits now is not started again: a Ctrl-C reaches every worker too (one process group), and
        // each drains and exits on its own while the gateway drains
        stopWatching();
        supervisor.stopRestarting();
        await gateway.drain(deadlineMs);
        await supervisor.close(); // the workers hold nothing now: each drains at once and exits
      },
      async close() {
        stopWatching();
        supervisor.stopRestarting();
        await gateway.close();
        await supervisor.close();
      },
    };
  } catch (error) {
    await supervisor.close();
    throw error;
  }
}
