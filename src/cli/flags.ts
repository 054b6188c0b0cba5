/**
 * Every serving flag, declared once: which commands take it, its help, parser and default. `kvfence serve`, `gateway`,
 * `prefill` and `decode` are built from this table, and each command's parsed flags become a typed config in one
 * function below; adding a flag is one row here and one field where it lands.
 */
import type { Command } from 'commander';
import type { WorkerRole } from '../cluster/control-protocol.js';
import { LOG_LEVELS, type LogLevel, WORKER_DEFAULTS, type WorkerConfig } from '../cluster/worker-config.js';
import { dnsResolver, staticResolver, type WorkerResolver } from '../cluster/worker-discovery.js';
import { BACKEND_PREFERENCES, type BackendPreference } from '../compute/select-backend.js';
import { HTTP_DEFAULTS } from '../gateway/http-limits.js';
import { SUPERVISOR_DEFAULTS } from '../launch/cluster-server.js';
import { GATEWAY_DEFAULTS } from '../launch/gateway-server.js';
import { defaultIncidentsPath, SERVE_DEFAULTS, type ServeConfig } from '../launch/serve-config.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { parseChoice, parseInteger } from './options.js';

export type ServingCommand = 'serve' | 'gateway' | 'prefill' | 'decode';

interface Flag {
  flags: string;
  help: string;
  on: readonly ServingCommand[];
  parse?: (value: string) => unknown;
  default?: unknown;
}

const ALL: readonly ServingCommand[] = ['serve', 'gateway', 'prefill', 'decode'];
const ENGINE: readonly ServingCommand[] = ['serve', 'prefill', 'decode'];
const HTTP: readonly ServingCommand[] = ['serve', 'gateway'];
const WORKER: readonly ServingCommand[] = ['prefill', 'decode'];
const int = (min: number, max: number) => parseInteger(min, max);

/** `--keep-q5-0`'s help, here and on `kvfence generate` */
export const KEEP_Q5_0_HELP =
  'keep Q5_0 weights as stored (default: as Q8_0 blocks of the same values, 1.55x their bytes, faster products)';

/**
 * Whether Q5_0 tensors are widened into Q8_0 blocks at load: unless `--keep-q5-0`, or `--q8-activations`, whose
 * products read Q5_0 as stored and give the same results either way (docs/native.md, "Q8 activations").
 */
export function widensQ5_0(o: { keepQ50?: boolean | undefined; q8Activations?: boolean | undefined }): boolean {
  return o.keepQ50 !== true && o.q8Activations !== true;
}

/** `--q8-activations`' help, here and on `kvfence generate` */
export const Q8_ACTIVATIONS_HELP =
  "products with quantized weights on activations rounded to 8-bit blocks, llama.cpp's arithmetic: faster " +
  'decode, no longer the f32 products; Q5_0 stays as stored (native backend only; docs/native.md)';

const FLAGS: readonly Flag[] = [
  { flags: '--model <file>', help: 'GGUF model file (default: the embedded generated model)', on: ALL },
  { flags: '--served-model-name <id>', help: "the model id clients send (default: the file's general.name)", on: ALL },
  {
    flags: '--backend <name>',
    help: 'compute backend: auto, native or reference',
    on: ENGINE,
    parse: parseChoice(BACKEND_PREFERENCES),
    default: 'auto',
  },
  { flags: '--keep-q5-0', help: KEEP_Q5_0_HELP, on: ENGINE },
  { flags: '--q8-activations', help: Q8_ACTIVATIONS_HELP, on: ENGINE },
  { flags: '--host <host>', help: 'address to listen on', on: HTTP, default: SERVE_DEFAULTS.host },
  {
    flags: '--port <n>',
    help: 'port (0: pick a free one)',
    on: HTTP,
    parse: int(0, 65535),
    default: SERVE_DEFAULTS.port,
  },
  {
    flags: '--api-keys <file>',
    help: 'key file of tenants, key hashes and limits (see `kvfence keys`; SIGHUP re-reads it); without it: dev mode',
    on: HTTP,
  },
  {
    flags: '--cluster-secret-file <file>',
    help: 'file holding the cluster secret (else $KVFENCE_CLUSTER_SECRET)',
    on: ['gateway', 'prefill', 'decode'],
  },
  { flags: '--kv-pages <n>', help: 'KV pool size in pages', on: ENGINE, parse: int(1, LIMITS.kvPagesMax) },
  {
    flags: '--kv-memory <size>',
    help: `KV pool size in bytes, e.g. 512MiB (default ${SERVE_DEFAULTS.kvMemory}; --kv-pages wins)`,
    on: ENGINE,
  },
  {
    flags: '--page-size <tokens>',
    help: 'tokens per KV page (the same on every node)',
    on: ENGINE,
    parse: int(1, LIMITS.pageSizeTokensMax),
    default: SERVE_DEFAULTS.pageSize,
  },
  {
    flags: '--max-context <tokens>',
    help: 'advertise at most this context (default: what is proven)',
    on: ALL,
    parse: int(2, LIMITS.contextTokensMax),
  },
  {
    flags: '--clamp-context',
    help: 'advertise the context that fits the pool and every tenant quota instead of refusing to start',
    on: ALL,
  },
  {
    flags: '--max-running <n>',
    help: 'sequences in the running batch at most',
    on: ENGINE,
    parse: int(1, LIMITS.runningSequencesMax),
    default: SERVE_DEFAULTS.runningMax,
  },
  {
    flags: '--max-waiting <n>',
    help: 'requests waiting for admission at most (more: 503)',
    on: ENGINE,
    parse: int(0, LIMITS.waitingRequestsMax),
    default: SERVE_DEFAULTS.waitingMax,
  },
  {
    flags: '--queue-timeout-ms <ms>',
    help: "longest wait for KV pages, the pool's or the tenant quota's (then 503)",
    on: ALL,
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: SERVE_DEFAULTS.queueTimeoutMs,
  },
  {
    flags: '--prefill-chunk <tokens>',
    help: 'prompt tokens of one sequence per step at most',
    on: ENGINE,
    parse: int(1, LIMITS.stepTokensMax),
    default: SERVE_DEFAULTS.prefillChunk,
  },
  {
    flags: '--step-tokens <tokens>',
    help: 'tokens of all sequences per step at most (≥ --max-running)',
    on: ENGINE,
    parse: int(1, LIMITS.stepTokensMax),
    default: SERVE_DEFAULTS.stepTokens,
  },
  {
    flags: '--prompt-step-ms <ms>',
    help: "a step's prompt tokens are sized to take about this long beside decoders (added to their inter-token time), 4x alone",
    on: ENGINE,
    parse: int(1, LIMITS.promptStepMsMax),
    default: SERVE_DEFAULTS.promptStepMs,
  },
  {
    flags: '--tenant-max-concurrent <n>',
    help: 'default per-tenant requests in flight, cluster-wide (more: 429)',
    on: HTTP,
    parse: int(1, LIMITS.tenantConcurrentRequestsMax),
    default: SERVE_DEFAULTS.tenantConcurrentMax,
  },
  {
    flags: '--tenant-kv-pages <n>',
    help: 'default per-tenant KV page quota (default: none beyond the pools)',
    on: HTTP,
    parse: int(1, LIMITS.kvPagesMax),
  },
  {
    flags: '--gateways <n>',
    help: 'how many gateways share the cluster: each enforces 1/n of every tenant limit, so the limits hold cluster-wide (default 1)',
    on: HTTP,
    parse: int(1, LIMITS.gatewaysMax),
  },
  {
    flags: '--prefix-cache-pages <n>',
    help: "pages of prompt KV each tenant's prefix cache may hold (on prefill workers when disaggregated); a tenant reuses only its own (default 0: off)",
    on: ['serve', 'prefill'],
    parse: int(0, LIMITS.kvPagesMax),
  },
  {
    flags: '--incidents-db <path>',
    help: 'SQLite file of isolation incidents (default: $XDG_STATE_HOME/kvfence/incidents.sqlite)',
    on: ENGINE,
  },
  {
    flags: '--request-timeout-ms <ms>',
    help: 'longest a request may take in all',
    on: HTTP,
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: SERVE_DEFAULTS.requestTimeoutMs,
  },
  {
    flags: '--headers-timeout-ms <ms>',
    help: 'a request line and headers must arrive within this (then 408, connection closed)',
    on: HTTP,
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: HTTP_DEFAULTS.headersTimeoutMs,
  },
  {
    flags: '--body-timeout-ms <ms>',
    help: 'a whole request, headers and body, must arrive within this (then 408, connection closed); responses are not cut',
    on: HTTP,
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: HTTP_DEFAULTS.bodyTimeoutMs,
  },
  {
    flags: '--keep-alive-timeout-ms <ms>',
    help: 'an idle connection between requests is closed after this',
    on: HTTP,
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: HTTP_DEFAULTS.keepAliveTimeoutMs,
  },
  {
    flags: '--unauth-connections-per-address <n>',
    help: 'connections from one address (IPv6: one /64) that have not sent an authenticated request; more are closed at once',
    on: HTTP,
    parse: int(1, LIMITS.tenantConcurrentRequestsMax),
    default: HTTP_DEFAULTS.unauthConnectionsPerAddress,
  },
  {
    flags: '--admin-token-file <file>',
    help: "file holding the token (Authorization: Bearer) that may read /metrics' per-tenant series (without it: left out)",
    on: HTTP,
  },
  {
    flags: '--log-level <level>',
    help: 'debug, info, warn, error or silent',
    on: ALL,
    parse: parseChoice(LOG_LEVELS),
    default: 'info',
  },
  {
    flags: '--no-engine-thread',
    help: "run model steps on the event loop's thread, beside HTTP (for profiling in one thread); default: their own thread",
    on: ['serve'],
  },
  {
    flags: '--disaggregated',
    help: 'run prefill and decode as separate supervised worker processes on loopback',
    on: ['serve'],
  },
  {
    flags: '--prefill <n>',
    help: 'with --disaggregated: prefill workers',
    on: ['serve'],
    parse: int(1, LIMITS.workerCountMax),
    default: 1,
  },
  {
    flags: '--decode <n>',
    help: 'with --disaggregated: decode workers',
    on: ['serve'],
    parse: int(1, LIMITS.workerCountMax),
    default: 1,
  },
  {
    flags: '--worker-start-timeout-ms <ms>',
    help: 'with --disaggregated: the longest a worker may take to load the model and listen, at start and at each restart',
    on: ['serve'],
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: SUPERVISOR_DEFAULTS.readyTimeoutMs,
  },
  {
    flags: '--prefill <addresses>',
    help: 'control addresses of the prefill workers, host:port, comma-separated',
    on: ['gateway'],
  },
  {
    flags: '--decode <addresses>',
    help: 'control addresses of the decode workers, host:port, comma-separated',
    on: ['gateway'],
  },
  {
    flags: '--prefill-dns <name:port>',
    help: 'find the prefill workers by DNS instead: every address of the name (a headless Service), asked again every --dns-refresh-ms',
    on: ['gateway'],
  },
  {
    flags: '--decode-dns <name:port>',
    help: 'find the decode workers by DNS instead (as --prefill-dns)',
    on: ['gateway'],
  },
  {
    flags: '--dns-refresh-ms <ms>',
    help: 'how often --prefill-dns and --decode-dns are resolved again (new workers join, removed ones drain)',
    on: ['gateway'],
    parse: int(100, LIMITS.queueTimeoutMsMax),
    default: GATEWAY_DEFAULTS.dnsRefreshMs,
  },
  {
    flags: '--drain-timeout-ms <ms>',
    help: "on SIGTERM: the longest requests in flight are served before the process exits (set the pod's terminationGracePeriodSeconds above it)",
    on: ALL,
    parse: int(1, LIMITS.transferTimeoutMsMax),
    default: GATEWAY_DEFAULTS.drainTimeoutMs,
  },
  {
    flags: '--health-listen <host:port>',
    help: "serve /health/live and /health/ready (503 while draining) on this address, for an orchestrator's probes",
    on: WORKER,
  },
  {
    flags: '--connect-timeout-ms <ms>',
    help: 'longest wait for every worker at startup',
    on: ['gateway'],
    parse: int(1, LIMITS.queueTimeoutMsMax),
    default: GATEWAY_DEFAULTS.connectTimeoutMs,
  },
  { flags: '--name <name>', help: "this worker's name in logs and metrics (default: its role)", on: WORKER },
  { flags: '--control-listen <host:port>', help: 'control address the gateway connects to', on: WORKER },
  {
    flags: '--transfer-listen <host:port>',
    help: `KV transfer address (default ${WORKER_DEFAULTS.decodeTransfer})`,
    on: ['decode'],
  },
  {
    flags: '--transfer-advertise <host:port>',
    help: 'the transfer address prefill workers are told (default: --transfer-listen)',
    on: ['decode'],
  },
  {
    flags: '--transfer-timeout-ms <ms>',
    help: 'a KV transfer must commit within this',
    on: WORKER,
    parse: int(1, LIMITS.transferTimeoutMsMax),
    default: WORKER_DEFAULTS.transferTimeoutMs,
  },
  {
    flags: '--idle-timeout-ms <ms>',
    help: 'longest silence on a transfer or a stalled control connection',
    on: WORKER,
    parse: int(1, LIMITS.transferTimeoutMsMax),
    default: WORKER_DEFAULTS.idleTimeoutMs,
  },
];

/** Adds the table's flags of `name` to a command. */
export function addFlags(command: Command, name: ServingCommand): Command {
  for (const f of FLAGS) {
    if (!f.on.includes(name)) continue;
    if (f.parse !== undefined) command.option(f.flags, f.help, f.parse, f.default);
    else if (f.default !== undefined) command.option(f.flags, f.help, f.default as string);
    else command.option(f.flags, f.help);
  }
  return command;
}

/** What commander parses from the table (each command sees its own subset; every field typed once). */
export interface ParsedFlags {
  model?: string;
  servedModelName?: string;
  backend: BackendPreference;
  /** commander's name for `--keep-q5-0` */
  keepQ50?: boolean;
  q8Activations?: boolean;
  host: string;
  port: number;
  apiKeys?: string;
  clusterSecretFile?: string;
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
  promptStepMs: number;
  tenantMaxConcurrent: number;
  gateways?: number;
  tenantKvPages?: number;
  prefixCachePages?: number;
  incidentsDb?: string;
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  keepAliveTimeoutMs: number;
  unauthConnectionsPerAddress: number;
  adminTokenFile?: string;
  logLevel: LogLevel;
  /** commander's `--no-engine-thread`: true unless given */
  engineThread?: boolean;
  disaggregated?: boolean;
  workerStartTimeoutMs: number;
  prefill: number | string;
  decode: number | string;
  prefillDns?: string;
  decodeDns?: string;
  dnsRefreshMs: number;
  drainTimeoutMs: number;
  healthListen?: string;
  connectTimeoutMs: number;
  name?: string;
  controlListen?: string;
  transferListen?: string;
  transferAdvertise?: string;
  transferTimeoutMs: number;
  idleTimeoutMs: number;
}

export function serveConfigOf(o: ParsedFlags): ServeConfig {
  return {
    ...(o.model !== undefined ? { modelPath: o.model } : {}),
    ...(o.servedModelName !== undefined ? { modelName: o.servedModelName } : {}),
    host: o.host,
    port: o.port,
    backend: o.backend,
    widenQ5_0: widensQ5_0(o),
    q8Activations: o.q8Activations === true,
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
    promptStepMs: o.promptStepMs,
    tenantConcurrentMax: o.tenantMaxConcurrent,
    ...(o.tenantKvPages !== undefined ? { tenantKvPages: o.tenantKvPages } : {}),
    ...(o.gateways !== undefined ? { gateways: o.gateways } : {}),
    ...(o.prefixCachePages !== undefined ? { prefixCachePages: o.prefixCachePages } : {}),
    incidentsDb: o.incidentsDb ?? defaultIncidentsPath(),
    requestTimeoutMs: o.requestTimeoutMs,
    http: {
      headersTimeoutMs: o.headersTimeoutMs,
      bodyTimeoutMs: o.bodyTimeoutMs,
      keepAliveTimeoutMs: o.keepAliveTimeoutMs,
      unauthConnectionsPerAddress: o.unauthConnectionsPerAddress,
    },
    ...(o.adminTokenFile !== undefined ? { adminTokenFile: o.adminTokenFile } : {}),
    logLevel: o.logLevel,
    drainTimeoutMs: o.drainTimeoutMs,
  };
}

/** A worker's config from its flags; `modelPath`, `modelName` and `pageCount` are resolved by the caller. */
export function workerConfigOf(
  role: WorkerRole,
  o: ParsedFlags,
  resolved: { modelPath: string; modelName: string; pageCount: number },
): WorkerConfig {
  return {
    role,
    name: o.name ?? role,
    modelPath: resolved.modelPath,
    modelName: resolved.modelName,
    backend: o.backend,
    widenQ5_0: widensQ5_0(o),
    q8Activations: o.q8Activations === true,
    settings: {
      pageSize: o.pageSize,
      pageCount: resolved.pageCount,
      ...(o.maxContext !== undefined ? { contextCap: o.maxContext } : {}),
      clampContext: o.clampContext === true,
      runningMax: o.maxRunning,
      waitingMax: o.maxWaiting,
      queueTimeoutMs: o.queueTimeoutMs,
      prefillChunkTokens: o.prefillChunk,
      stepTokenBudget: o.stepTokens,
      promptStepMs: o.promptStepMs,
      prefixCachePages: o.prefixCachePages ?? 0,
    },
    controlListen:
      o.controlListen ?? (role === 'prefill' ? WORKER_DEFAULTS.prefillControl : WORKER_DEFAULTS.decodeControl),
    ...(role === 'decode' ? { transferListen: o.transferListen ?? WORKER_DEFAULTS.decodeTransfer } : {}),
    ...(o.transferAdvertise !== undefined ? { transferAdvertise: o.transferAdvertise } : {}),
    transferTimeoutMs: o.transferTimeoutMs,
    idleTimeoutMs: o.idleTimeoutMs,
    handshakeTimeoutMs: WORKER_DEFAULTS.handshakeTimeoutMs,
    incidentsDb: o.incidentsDb ?? defaultIncidentsPath(),
    logLevel: o.logLevel,
    drainTimeoutMs: o.drainTimeoutMs,
  };
}

/** The gateway's workers: `--prefill a:1,b:2` (fixed) or `--prefill-dns name:port` (resolved again and again). */
export function workerResolversOf(o: ParsedFlags): Record<WorkerRole, WorkerResolver> {
  const one = (role: WorkerRole, list: unknown, dns: string | undefined): WorkerResolver => {
    if ((list === undefined) === (dns === undefined))
      throw new KvfenceError('invalid_argument', `the gateway takes exactly one of --${role} and --${role}-dns`);
    return dns !== undefined ? dnsResolver(dns) : staticResolver(addressList(`--${role}`, String(list)));
  };
  return { prefill: one('prefill', o.prefill, o.prefillDns), decode: one('decode', o.decode, o.decodeDns) };
}

/** `--prefill a:1,b:2` → addresses, each host:port. */
export function addressList(flag: string, text: string): string[] {
  const list = text
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  if (list.length === 0 || list.length > LIMITS.workerCountMax)
    throw new KvfenceError(
      'invalid_argument',
      `${flag} takes 1 to ${LIMITS.workerCountMax} host:port addresses, comma-separated`,
    );
  for (const a of list) {
    if (!/^[^\s]+:\d{1,5}$/.test(a)) throw new KvfenceError('invalid_argument', `${flag}: "${a}" is not host:port`);
  }
  return list;
}
