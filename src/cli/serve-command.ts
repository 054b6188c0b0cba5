/**
 * `kvfence serve`: the colocated server (gateway + one worker with its KV pool, in one process). Everything is resolved
 * and validated once here; the capacity proof (I1) runs before the port opens, and its result is printed.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { pino } from 'pino';
import { ColocatedWorker } from '../colocated/colocated-worker.js';
import { BACKEND_PREFERENCES, type BackendPreference, selectBackend } from '../compute/select-backend.js';
import { servedModel } from '../gateway/served-model.js';
import { buildGateway, type Gateway } from '../gateway/server.js';
import { loadKeyFile, TenantDirectory } from '../gateway/tenants.js';
import { IncidentStore } from '../incidents/incident-store.js';
import { pageCountForMemory, parseByteSize } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { type DisaggregatedConfig, startDisaggregatedServer } from './gateway-command.js';
import { parseChoice, parseInteger } from './options.js';

export interface ServeConfig {
  /** GGUF file; undefined: the embedded generated model */
  modelPath?: string;
  /** the id clients send as `model` (default: the file's general.name) */
  modelName?: string;
  host: string;
  port: number;
  /** compute backend: auto (native when it loads, else the reference with a warning), native or reference */
  backend?: BackendPreference;
  apiKeysPath?: string;
  kvPages?: number;
  kvMemory?: string;
  pageSize: number;
  contextCap?: number;
  clampContext: boolean;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  prefillChunk: number;
  stepTokens: number;
  tenantConcurrentMax: number;
  /** default per-tenant page quota; undefined: the whole pool */
  tenantKvPages?: number;
  /** pages each tenant's prefix cache may hold; undefined or 0: no prefix cache */
  prefixCachePages?: number;
  incidentsDb: string;
  requestTimeoutMs: number;
  /** pino level: info, warn, error, debug or silent */
  logLevel: string;
  /** benchmarks only */
  unchecked?: boolean;
  /** the clock of queue deadlines (default Date.now; tests move time by hand) */
  now?: () => number;
}

export const SERVE_DEFAULTS = {
  host: '127.0.0.1',
  port: 8000,
  kvMemory: '1GiB',
  pageSize: 16,
  runningMax: 32,
  waitingMax: 256,
  queueTimeoutMs: 30_000,
  prefillChunk: 512,
  stepTokens: 2048,
  tenantConcurrentMax: 64,
  requestTimeoutMs: 600_000,
} as const;

export interface RunningServer {
  url: string;
  gateway: Gateway;
  worker: ColocatedWorker;
  incidents: IncidentStore;
  devMode: boolean;
  close(): Promise<void>;
}

export async function startServer(
  config: ServeConfig,
  announce: (line: string) => void = () => {},
): Promise<RunningServer> {
  const model = loadModel(config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL));
  const c = model.config;
  const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, config.pageSize);
  const pageCount =
    config.kvPages ?? pageCountForMemory(layout, parseByteSize(config.kvMemory ?? SERVE_DEFAULTS.kvMemory));
  const tenants = new TenantDirectory(config.apiKeysPath === undefined ? undefined : loadKeyFile(config.apiKeysPath));
  const logger = pino({ level: config.logLevel });
  const incidents = new IncidentStore(config.incidentsDb);
  let worker: ColocatedWorker;
  try {
    worker = new ColocatedWorker({
      model,
      backend: selectBackend(config.backend ?? 'auto', announce),
      pageSize: config.pageSize,
      pageCount,
      ...(config.contextCap !== undefined ? { contextCap: config.contextCap } : {}),
      clampContext: config.clampContext,
      runningMax: config.runningMax,
      waitingMax: config.waitingMax,
      queueTimeoutMs: config.queueTimeoutMs,
      prefillChunkTokens: config.prefillChunk,
      stepTokenBudget: config.stepTokens,
      tenantLimits: {
        defaults: { concurrentRequestsMax: config.tenantConcurrentMax, kvPagesMax: config.tenantKvPages ?? pageCount },
        overrides: tenants.keyFile?.tenants ?? new Map(),
      },
      incidents,
      log: logger,
      ...(config.prefixCachePages !== undefined ? { prefixCachePages: config.prefixCachePages } : {}),
      ...(config.unchecked === true ? { unchecked: true } : {}),
      ...(config.now !== undefined ? { now: config.now } : {}),
    });
  } catch (error) {
    incidents.close();
    throw error;
  }
  const served = servedModel(model, config.modelName ?? c.name);
  const gateway = buildGateway({
    model: served,
    worker,
    tenants,
    logger,
    requestTimeoutMs: config.requestTimeoutMs,
    retryAfterS: 1,
  });
  const address = await gateway.app.listen({ host: config.host, port: config.port });
  const pageBytes = layout.floatsPerPage * 4;
  announce(
    `kvfence: KV pool ${pageCount} pages × ${config.pageSize} tokens (${((pageCount * pageBytes) / 2 ** 20).toFixed(1)} MiB); ${worker.capacity.summary}`,
  );
  if ((config.prefixCachePages ?? 0) > 0)
    announce(`kvfence: prefix cache on: up to ${config.prefixCachePages} pages a tenant, reused only by that tenant`);
  if (tenants.devMode)
    announce(
      'kvfence: DEV MODE: no --api-keys given: single tenant "dev", no authentication. Do not expose this port.',
    );
  else announce(`kvfence: ${tenants.tenants().length} tenants from ${config.apiKeysPath}`);
  announce(`kvfence: incidents are recorded in ${config.incidentsDb}`);
  announce(`kvfence: serving model "${served.id}" (context ${worker.provenContext}) on ${address}`);
  return {
    url: address,
    gateway,
    worker,
    incidents,
    devMode: tenants.devMode,
    async close() {
      await worker.close();
      await gateway.app.close();
      incidents.close();
    },
  };
}

export function defaultIncidentsPath(env: NodeJS.ProcessEnv = process.env): string {
  const state = env['XDG_STATE_HOME'];
  return join(
    state !== undefined && state !== '' ? state : join(homedir(), '.local', 'state'),
    'kvfence',
    'incidents.sqlite',
  );
}

interface ServeCliOptions {
  model?: string;
  backend: BackendPreference;
  servedModelName?: string;
  host: string;
  port: number;
  apiKeys?: string;
  kvPages?: number;
  kvMemory?: string;
  pageSize: number;
  maxContext?: number;
  clampContext?: boolean;
  maxRunning: number;
  maxWaiting: number;
  queueTimeoutMs: number;
  prefillChunk: number;
  stepTokens: number;
  tenantMaxConcurrent: number;
  tenantKvPages?: number;
  prefixCachePages?: number;
  incidentsDb?: string;
  requestTimeoutMs: number;
  logLevel: string;
  disaggregated?: boolean;
  prefill: number;
  decode: number;
}

export function addServeCommand(program: Command): void {
  const int = (min: number, max: number) => parseInteger(min, max);
  program
    .command('serve')
    .description('serve a model over an OpenAI-compatible API (the embedded model unless --model is given)')
    .option('--model <file>', 'GGUF model file (default: the embedded generated model)')
    .option('--served-model-name <id>', "the model id clients send (default: the file's general.name)")
    .option('--backend <name>', 'compute backend: auto, native or reference', parseChoice(BACKEND_PREFERENCES), 'auto')
    .option('--host <host>', 'address to listen on', SERVE_DEFAULTS.host)
    .option('--port <n>', 'port (0: pick a free one)', int(0, 65535), SERVE_DEFAULTS.port)
    .option(
      '--api-keys <file>',
      'key file of tenants and key hashes (see `kvfence keys`); without it: single-tenant dev mode',
    )
    .option('--kv-pages <n>', 'KV pool size in pages', int(1, LIMITS.kvPagesMax))
    .option(
      '--kv-memory <size>',
      `KV pool size in bytes, e.g. 512MiB (default ${SERVE_DEFAULTS.kvMemory}; --kv-pages wins)`,
    )
    .option('--page-size <tokens>', 'tokens per KV page', int(1, LIMITS.pageSizeTokensMax), SERVE_DEFAULTS.pageSize)
    .option(
      '--max-context <tokens>',
      "advertise at most this context (default: the model's)",
      int(2, LIMITS.contextTokensMax),
    )
    .option('--clamp-context', 'advertise the context that fits the pool instead of refusing to start')
    .option(
      '--max-running <n>',
      'sequences in the running batch at most',
      int(1, LIMITS.runningSequencesMax),
      SERVE_DEFAULTS.runningMax,
    )
    .option(
      '--max-waiting <n>',
      'requests waiting for admission at most (more: 503)',
      int(0, LIMITS.waitingRequestsMax),
      SERVE_DEFAULTS.waitingMax,
    )
    .option(
      '--queue-timeout-ms <ms>',
      'longest wait for admission (then 503)',
      int(1, LIMITS.queueTimeoutMsMax),
      SERVE_DEFAULTS.queueTimeoutMs,
    )
    .option(
      '--prefill-chunk <tokens>',
      'prompt tokens of one sequence per step at most',
      int(1, LIMITS.stepTokensMax),
      SERVE_DEFAULTS.prefillChunk,
    )
    .option(
      '--step-tokens <tokens>',
      'tokens of all sequences per step at most (≥ --max-running)',
      int(1, LIMITS.stepTokensMax),
      SERVE_DEFAULTS.stepTokens,
    )
    .option(
      '--tenant-max-concurrent <n>',
      'default per-tenant requests in flight (more: 429)',
      int(1, LIMITS.tenantConcurrentRequestsMax),
      SERVE_DEFAULTS.tenantConcurrentMax,
    )
    .option(
      '--tenant-kv-pages <n>',
      'default per-tenant KV page quota (default: the whole pool)',
      int(1, LIMITS.kvPagesMax),
    )
    .option(
      '--prefix-cache-pages <n>',
      "pages of prompt KV each tenant's prefix cache may hold; a tenant's requests reuse only its own (default 0: off; not with --disaggregated)",
      int(0, LIMITS.kvPagesMax),
    )
    .option(
      '--incidents-db <path>',
      'SQLite file of isolation incidents (default: $XDG_STATE_HOME/kvfence/incidents.sqlite)',
    )
    .option(
      '--request-timeout-ms <ms>',
      'longest a request may take in all',
      int(1, LIMITS.queueTimeoutMsMax),
      SERVE_DEFAULTS.requestTimeoutMs,
    )
    .option('--log-level <level>', 'info, warn, error or silent', 'info')
    .option('--disaggregated', 'run prefill and decode as separate supervised worker processes on loopback')
    .option('--prefill <n>', 'with --disaggregated: prefill workers', int(1, LIMITS.workerCountMax), 1)
    .option('--decode <n>', 'with --disaggregated: decode workers', int(1, LIMITS.workerCountMax), 1)
    .action(async (o: ServeCliOptions) => {
      const announce = (line: string) => process.stdout.write(`${line}\n`);
      const config = configFromCli(o);
      if (o.disaggregated === true && (config.prefixCachePages ?? 0) > 0)
        throw new KvfenceError('invalid_argument', '--prefix-cache-pages is not supported with --disaggregated');
      const server =
        o.disaggregated === true
          ? await startDisaggregatedServer(disaggregatedConfig(config, o.prefill, o.decode, 'inherit'), announce)
          : await startServer(config, announce);
      const stop = () => {
        void server.close().then(() => process.exit(0));
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
}

/** `kvfence serve --disaggregated`: the same settings, split into the gateway's and the workers' flags. */
export function disaggregatedConfig(
  config: ServeConfig,
  prefillCount: number,
  decodeCount: number,
  workerStdout: 'inherit' | 'ignore',
): DisaggregatedConfig {
  const flag = (name: string, value: number | string | undefined) => (value === undefined ? [] : [name, String(value)]);
  const workerArgs = [
    ...flag('--model', config.modelPath),
    ...flag('--served-model-name', config.modelName),
    ...flag('--backend', config.backend),
    ...flag('--page-size', config.pageSize),
    ...flag('--kv-pages', config.kvPages),
    ...flag('--kv-memory', config.kvMemory),
    ...flag('--max-context', config.contextCap),
    ...(config.clampContext ? ['--clamp-context'] : []),
    ...flag('--max-running', config.runningMax),
    ...flag('--max-waiting', config.waitingMax),
    ...flag('--queue-timeout-ms', config.queueTimeoutMs),
    ...flag('--prefill-chunk', config.prefillChunk),
    ...flag('--step-tokens', config.stepTokens),
    ...flag('--tenant-max-concurrent', config.tenantConcurrentMax),
    ...flag('--tenant-kv-pages', config.tenantKvPages),
    ...flag('--log-level', config.logLevel),
  ];
  return {
    gateway: {
      ...(config.modelPath !== undefined ? { modelPath: config.modelPath } : {}),
      ...(config.modelName !== undefined ? { modelName: config.modelName } : {}),
      host: config.host,
      port: config.port,
      ...(config.apiKeysPath !== undefined ? { apiKeysPath: config.apiKeysPath } : {}),
      ...(config.contextCap !== undefined ? { contextCap: config.contextCap } : {}),
      requestTimeoutMs: config.requestTimeoutMs,
      connectTimeoutMs: 60_000,
      logLevel: config.logLevel,
    },
    prefillCount,
    decodeCount,
    workerArgs,
    incidentsDb: config.incidentsDb,
    workerStdout,
  };
}

function configFromCli(o: ServeCliOptions): ServeConfig {
  if (!['info', 'warn', 'error', 'silent', 'debug'].includes(o.logLevel))
    throw new KvfenceError('invalid_argument', `unknown log level ${o.logLevel}`);
  return {
    ...(o.model !== undefined ? { modelPath: o.model } : {}),
    ...(o.servedModelName !== undefined ? { modelName: o.servedModelName } : {}),
    host: o.host,
    port: o.port,
    backend: o.backend,
    ...(o.apiKeys !== undefined ? { apiKeysPath: o.apiKeys } : {}),
    ...(o.kvPages !== undefined ? { kvPages: o.kvPages } : {}),
    ...(o.kvMemory !== undefined ? { kvMemory: o.kvMemory } : {}),
    pageSize: o.pageSize,
    ...(o.maxContext !== undefined ? { contextCap: o.maxContext } : {}),
    clampContext: o.clampContext === true,
    runningMax: o.maxRunning,
    waitingMax: o.maxWaiting,
    queueTimeoutMs: o.queueTimeoutMs,
    prefillChunk: o.prefillChunk,
    stepTokens: o.stepTokens,
    tenantConcurrentMax: o.tenantMaxConcurrent,
    ...(o.tenantKvPages !== undefined ? { tenantKvPages: o.tenantKvPages } : {}),
    ...(o.prefixCachePages !== undefined ? { prefixCachePages: o.prefixCachePages } : {}),
    incidentsDb: o.incidentsDb ?? defaultIncidentsPath(),
    requestTimeoutMs: o.requestTimeoutMs,
    logLevel: o.logLevel,
  };
}
