/**
 * `kvfence serve`'s settings, resolved once (flags, defaults) and shared by both deployments: a colocated server uses
 * them whole; `serve --disaggregated` splits them into the gateway's and each worker's (cluster-server.ts).
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { LogLevel } from '../cluster/worker-config.js';
import type { BackendPreference } from '../compute/select-backend.js';
import type { WorkerSettings } from '../engine/worker-kv.js';
import type { HttpLimits } from '../gateway/http-limits.js';
import { pageCountForMemory, parseByteSize } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import type { ModelHead } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface ServeConfig {
  /** GGUF file; undefined: the embedded generated model */
  modelPath?: string;
  /** the id clients send as `model` (default: the file's general.name) */
  modelName?: string;
  host: string;
  port: number;
  /** compute backend: auto (native when it loads, else the reference with a warning), native or reference */
  backend?: BackendPreference;
  /** keep Q5_0 weights as Q8_0 blocks of the same values (load-model.ts; default true, `--keep-q5-0` false) */
  widenQ5_0?: boolean;
  /**
   * round activations to 8-bit blocks for quantized products (native-backend.ts; default
   * false, `--q8-activations` true)
   */
  q8Activations?: boolean;
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
  /** a step's prompt tokens are sized to take about this long beside decoders (4x without them) */
  promptStepMs: number;
  /** default per-tenant requests in flight, cluster-wide */
  tenantConcurrentMax: number;
  /** default per-tenant page quota; undefined: none beyond the pools */
  tenantKvPages?: number;
  /** gateways sharing the cluster, each enforcing its share of the tenant limits; undefined: 1 */
  gateways?: number;
  /** pages each tenant's prefix cache may hold; undefined or 0: no prefix cache */
  prefixCachePages?: number;
  incidentsDb: string;
  requestTimeoutMs: number;
  /** HTTP timeouts and the unauthenticated-connection bound (absent fields: HTTP_DEFAULTS) */
  http?: Partial<HttpLimits>;
  /** the token file for /metrics' per-tenant series (absent: they are left out) */
  adminTokenFile?: string;
  logLevel: LogLevel;
  /** on SIGTERM: the longest requests in flight are served before exit (workers too, disaggregated) */
  drainTimeoutMs?: number;
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
  promptStepMs: 50,
  tenantConcurrentMax: 64,
  requestTimeoutMs: 600_000,
} as const;

/** Pages of the pool: `--kv-pages`, or what `--kv-memory` holds of this model's pages. */
export function resolvePageCount(model: ModelHead, pageSize: number, kvPages?: number, kvMemory?: string): number {
  const c = model.config;
  const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, pageSize);
  const pages = kvPages ?? pageCountForMemory(layout, parseByteSize(kvMemory ?? SERVE_DEFAULTS.kvMemory));
  // one pool is one typed array: refused here, naming the flags, not by V8 when the pool is allocated
  const pagesMax = Math.floor(LIMITS.kvPoolValuesMax / layout.valuesPerPage);
  if (pages > pagesMax) {
    const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(1)} GiB`;
    throw new KvfenceError(
      'invalid_argument',
      `a KV pool of ${pages} pages (${gib(pages * layout.bytesPerPage)}) is more than one pool holds: at most ` +
        `${pagesMax} pages of this model (${gib(pagesMax * layout.bytesPerPage)}); lower --kv-memory or --kv-pages`,
    );
  }
  return pages;
}

/** A worker's settings from the serve settings and its resolved page count. */
export function workerSettingsOf(config: ServeConfig, pageCount: number): WorkerSettings {
  return {
    pageSize: config.pageSize,
    pageCount,
    ...(config.contextCap !== undefined ? { contextCap: config.contextCap } : {}),
    clampContext: config.clampContext,
    runningMax: config.runningMax,
    waitingMax: config.waitingMax,
    queueTimeoutMs: config.queueTimeoutMs,
    prefillChunkTokens: config.prefillChunk,
    stepTokenBudget: config.stepTokens,
    promptStepMs: config.promptStepMs,
    prefixCachePages: config.prefixCachePages ?? 0,
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
