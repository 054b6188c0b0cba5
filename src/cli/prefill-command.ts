/**
 * `kvfence prefill` and `kvfence decode`: one worker process of a disaggregated deployment (DESIGN §1). Both take the
 * model, their own KV pool and scheduler bounds, a control listen address, and the cluster secret from
 * --cluster-secret-file or KVFENCE_CLUSTER_SECRET (never a plain flag, so it does not show in `ps`). Each proves I1 for
 * its own pool before it listens, or refuses to start with both numbers.
 */
import type { Command } from 'commander';
import { pino } from 'pino';
import { loadClusterSecret } from '../cluster/cluster-secret.js';
import type { WorkerRole } from '../cluster/control-protocol.js';
import { type RunningWorker, startWorkerProcess } from '../cluster/worker-process.js';
import { BACKEND_PREFERENCES, type BackendPreference, selectBackend } from '../compute/select-backend.js';
import { IncidentStore } from '../incidents/incident-store.js';
import { pageCountForMemory, parseByteSize } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { parseChoice, parseInteger } from './options.js';
import { defaultIncidentsPath, SERVE_DEFAULTS } from './serve-command.js';

export const WORKER_DEFAULTS = {
  prefillControl: '127.0.0.1:7101',
  decodeControl: '127.0.0.1:7201',
  decodeTransfer: '127.0.0.1:7202',
  transferTimeoutMs: 30_000,
  idleTimeoutMs: 10_000,
  handshakeTimeoutMs: 5_000,
} as const;

export interface WorkerCliOptions {
  model?: string;
  servedModelName?: string;
  backend: BackendPreference;
  name?: string;
  controlListen?: string;
  transferListen?: string;
  transferAdvertise?: string;
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
  transferTimeoutMs: number;
  idleTimeoutMs: number;
  clusterSecretFile?: string;
  incidentsDb?: string;
  logLevel: string;
}

export function addPrefillCommand(program: Command): void {
  addWorkerCommand(program, 'prefill');
}

/** Shared by `kvfence prefill` and `kvfence decode` (decode-command.ts). */
export function addWorkerCommand(program: Command, role: WorkerRole): void {
  const int = (min: number, max: number) => parseInteger(min, max);
  const command = program
    .command(role)
    .description(
      role === 'prefill'
        ? 'run a prefill worker: computes prompt KV and pushes it to decode workers (disaggregated serving)'
        : 'run a decode worker: reserves pages, receives verified KV transfers, decodes (disaggregated serving)',
    )
    .option('--model <file>', 'GGUF model file (default: the embedded generated model); the same on every node')
    .option('--served-model-name <id>', "the model id (default: the file's general.name); the same on every node")
    .option('--backend <name>', 'compute backend: auto, native or reference', parseChoice(BACKEND_PREFERENCES), 'auto')
    .option('--name <name>', `this worker's name in logs and metrics (default: ${role})`)
    .option(
      '--control-listen <host:port>',
      `control address the gateway connects to (default ${role === 'prefill' ? WORKER_DEFAULTS.prefillControl : WORKER_DEFAULTS.decodeControl})`,
    )
    .option('--cluster-secret-file <file>', 'file holding the cluster secret (else $KVFENCE_CLUSTER_SECRET)')
    .option('--kv-pages <n>', 'KV pool size in pages', int(1, LIMITS.kvPagesMax))
    .option('--kv-memory <size>', `KV pool size in bytes (default ${SERVE_DEFAULTS.kvMemory}; --kv-pages wins)`)
    .option(
      '--page-size <tokens>',
      'tokens per KV page (the same on every node)',
      int(1, LIMITS.pageSizeTokensMax),
      SERVE_DEFAULTS.pageSize,
    )
    .option(
      '--max-context <tokens>',
      "prove at most this context (default: the model's)",
      int(2, LIMITS.contextTokensMax),
    )
    .option('--clamp-context', 'prove the context that fits the pool instead of refusing to start')
    .option(
      '--max-running <n>',
      'requests in progress at most',
      int(1, LIMITS.runningSequencesMax),
      SERVE_DEFAULTS.runningMax,
    )
    .option(
      '--max-waiting <n>',
      'requests waiting for pages at most',
      int(0, LIMITS.waitingRequestsMax),
      SERVE_DEFAULTS.waitingMax,
    )
    .option(
      '--queue-timeout-ms <ms>',
      'longest wait for pages (then 503)',
      int(1, LIMITS.queueTimeoutMsMax),
      SERVE_DEFAULTS.queueTimeoutMs,
    )
    .option(
      '--prefill-chunk <tokens>',
      'prompt tokens of one sequence per step',
      int(1, LIMITS.stepTokensMax),
      SERVE_DEFAULTS.prefillChunk,
    )
    .option(
      '--step-tokens <tokens>',
      'tokens of all sequences per step',
      int(1, LIMITS.stepTokensMax),
      SERVE_DEFAULTS.stepTokens,
    )
    .option(
      '--tenant-max-concurrent <n>',
      'per-tenant requests in flight here',
      int(1, LIMITS.tenantConcurrentRequestsMax),
      SERVE_DEFAULTS.tenantConcurrentMax,
    )
    .option('--tenant-kv-pages <n>', 'per-tenant KV page quota (default: the whole pool)', int(1, LIMITS.kvPagesMax))
    .option(
      '--transfer-timeout-ms <ms>',
      'a KV transfer must commit within this',
      int(1, LIMITS.transferTimeoutMsMax),
      WORKER_DEFAULTS.transferTimeoutMs,
    )
    .option(
      '--idle-timeout-ms <ms>',
      'longest silence on a transfer or a stalled control connection',
      int(1, LIMITS.transferTimeoutMsMax),
      WORKER_DEFAULTS.idleTimeoutMs,
    )
    .option(
      '--incidents-db <path>',
      'SQLite file of isolation incidents (default: $XDG_STATE_HOME/kvfence/incidents.sqlite)',
    )
    .option('--log-level <level>', 'info, warn, error or silent', 'info');
  if (role === 'decode') {
    command
      .option('--transfer-listen <host:port>', `KV transfer address (default ${WORKER_DEFAULTS.decodeTransfer})`)
      .option(
        '--transfer-advertise <host:port>',
        'the transfer address prefill workers are told (default: --transfer-listen)',
      );
  }
  command.action(async (o: WorkerCliOptions) => {
    const worker = await runWorker(role, o, (line) => process.stdout.write(`${line}\n`));
    const stop = () => {
      void worker.close().then(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    // supervised (kvfence serve --disaggregated): report the addresses, and die with the supervisor
    if (process.send !== undefined) {
      process.send({ kind: 'ready', control: worker.controlAddress, transfer: worker.transferAddress });
      process.once('disconnect', () => process.exit(0));
    }
  });
}

export async function runWorker(
  role: WorkerRole,
  o: WorkerCliOptions,
  announce: (line: string) => void,
): Promise<RunningWorker> {
  if (!['info', 'warn', 'error', 'silent', 'debug'].includes(o.logLevel))
    throw new KvfenceError('invalid_argument', `unknown log level ${o.logLevel}`);
  const { secret, warning } = loadClusterSecret(o.clusterSecretFile, process.env);
  if (warning !== undefined) announce(`kvfence: WARNING: ${warning}`);
  const model = loadModel(o.model ?? ensureGeneratedModel(DEFAULT_MODEL));
  const c = model.config;
  const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, o.pageSize);
  const pageCount = o.kvPages ?? pageCountForMemory(layout, parseByteSize(o.kvMemory ?? SERVE_DEFAULTS.kvMemory));
  const name = o.name ?? role;
  const log = pino({ level: o.logLevel }).child({ worker: name });
  const incidents = new IncidentStore(o.incidentsDb ?? defaultIncidentsPath());
  let worker: RunningWorker;
  try {
    worker = await startWorkerProcess({
      role,
      name,
      model,
      modelName: o.servedModelName ?? c.name,
      backend: selectBackend(o.backend, announce),
      pageSize: o.pageSize,
      pageCount,
      ...(o.maxContext !== undefined ? { contextCap: o.maxContext } : {}),
      clampContext: o.clampContext === true,
      runningMax: o.maxRunning,
      waitingMax: o.maxWaiting,
      queueTimeoutMs: o.queueTimeoutMs,
      prefillChunkTokens: o.prefillChunk,
      stepTokenBudget: o.stepTokens,
      tenantConcurrentMax: o.tenantMaxConcurrent,
      tenantKvPagesMax: o.tenantKvPages ?? pageCount,
      controlListen:
        o.controlListen ?? (role === 'prefill' ? WORKER_DEFAULTS.prefillControl : WORKER_DEFAULTS.decodeControl),
      ...(role === 'decode' ? { transferListen: o.transferListen ?? WORKER_DEFAULTS.decodeTransfer } : {}),
      ...(o.transferAdvertise !== undefined ? { transferAdvertise: o.transferAdvertise } : {}),
      transferTimeoutMs: o.transferTimeoutMs,
      idleTimeoutMs: o.idleTimeoutMs,
      handshakeTimeoutMs: WORKER_DEFAULTS.handshakeTimeoutMs,
      secret,
      incidents,
      log,
      env: process.env,
    });
  } catch (error) {
    incidents.close();
    throw error;
  }
  announce(
    `kvfence: ${role} worker ${name}: KV pool ${pageCount} pages × ${o.pageSize} tokens; ${worker.capacity.summary}`,
  );
  announce(`kvfence: ${role} worker ${name}: control on ${worker.controlAddress}`);
  if (worker.transferAddress !== undefined)
    announce(`kvfence: ${role} worker ${name}: KV transfers on ${worker.transferAddress}`);
  return {
    ...worker,
    close: async () => {
      await worker.close();
      incidents.close();
    },
  };
}
