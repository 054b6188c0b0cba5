/**
 * What a prefill or decode worker is told at startup, resolved once and typed. `kvfence prefill|decode` builds it from
 * flags; `kvfence serve --disaggregated` builds it for each child and sends it over the IPC channel (with the cluster
 * secret beside it), never as a rebuilt command line or environment. `parseWorkerStart` checks what arrives.
 */
import type { Backend } from '../compute/backend.js';
import { BACKEND_PREFERENCES, type BackendPreference } from '../compute/select-backend.js';
import type { WorkerSettings } from '../engine/worker-kv.js';
import type { IncidentStore } from '../incidents/incident-store.js';
import type { CapacityProof } from '../kv/capacity.js';
import type { LoadedModel } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { LogSink } from '../util/log.js';
import type { TransferTransport } from '../wire/transport.js';
import type { WorkerHello, WorkerRole } from './control-protocol.js';

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface WorkerConfig {
  role: WorkerRole;
  /** in logs and metrics (e.g. decode-0) */
  name: string;
  modelPath: string;
  /** the model id every node of the cluster agrees on */
  modelName: string;
  backend: BackendPreference;
  /** keep Q5_0 weights as Q8_0 blocks of the same values (load-model.ts; default true, `--keep-q5-0` false) */
  widenQ5_0?: boolean | undefined;
  /**
   * round activations to 8-bit blocks for quantized products (native-backend.ts; default
   * false, `--q8-activations` true)
   */
  q8Activations?: boolean | undefined;
  settings: WorkerSettings;
  /** host:port of the control listener (port 0: any) */
  controlListen: string;
  /** decode: host:port of the transfer listener, and the address prefill workers are told to use */
  transferListen?: string;
  transferAdvertise?: string;
  transferTimeoutMs: number;
  idleTimeoutMs: number;
  handshakeTimeoutMs: number;
  incidentsDb: string;
  logLevel: LogLevel;
  /** on SIGTERM: the longest the worker serves what it holds before it exits (default WORKER_DEFAULTS) */
  drainTimeoutMs?: number;
}

export const WORKER_DEFAULTS = {
  prefillControl: '127.0.0.1:7101',
  decodeControl: '127.0.0.1:7201',
  decodeTransfer: '127.0.0.1:7202',
  transferTimeoutMs: 30_000,
  idleTimeoutMs: 10_000,
  handshakeTimeoutMs: 5_000,
  drainTimeoutMs: 30_000,
} as const;

/** The supervisor's one message to a child: its config and the cluster secret (hex). */
export interface WorkerStart {
  kind: 'start';
  config: WorkerConfig;
  secretHex: string;
}

/** Checks a start message field by field; throws a KvfenceError naming the first bad one. */
export function parseWorkerStart(value: unknown): WorkerStart {
  const m = obj(value, 'start message');
  if (m['kind'] !== 'start') bad('kind', 'is not "start"');
  const c = obj(m['config'], 'config');
  const s = obj(c['settings'], 'settings');
  const role = str(c['role'], 'role');
  if (role !== 'prefill' && role !== 'decode') bad('role', `is ${role}`);
  const backend = str(c['backend'], 'backend');
  if (!(BACKEND_PREFERENCES as readonly string[]).includes(backend)) bad('backend', `is ${backend}`);
  const logLevel = str(c['logLevel'], 'logLevel');
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) bad('logLevel', `is ${logLevel}`);
  const ms = (o: Record<string, unknown>, k: string) => int(o[k], k, 1, LIMITS.transferTimeoutMsMax);
  const optional = (k: string) => (c[k] === undefined ? {} : { [k]: str(c[k], k) });
  const config: WorkerConfig = {
    role,
    name: str(c['name'], 'name'),
    modelPath: str(c['modelPath'], 'modelPath'),
    modelName: str(c['modelName'], 'modelName'),
    backend: backend as BackendPreference,
    ...(c['widenQ5_0'] !== undefined ? { widenQ5_0: bool(c['widenQ5_0'], 'widenQ5_0') } : {}),
    ...(c['q8Activations'] !== undefined ? { q8Activations: bool(c['q8Activations'], 'q8Activations') } : {}),
    settings: {
      pageSize: int(s['pageSize'], 'pageSize', 1, LIMITS.pageSizeTokensMax),
      pageCount: int(s['pageCount'], 'pageCount', 1, LIMITS.kvPagesMax),
      ...(s['contextCap'] !== undefined
        ? { contextCap: int(s['contextCap'], 'contextCap', 2, LIMITS.contextTokensMax) }
        : {}),
      clampContext: bool(s['clampContext'], 'clampContext'),
      runningMax: int(s['runningMax'], 'runningMax', 1, LIMITS.runningSequencesMax),
      waitingMax: int(s['waitingMax'], 'waitingMax', 0, LIMITS.waitingRequestsMax),
      queueTimeoutMs: int(s['queueTimeoutMs'], 'queueTimeoutMs', 1, LIMITS.queueTimeoutMsMax),
      prefillChunkTokens: int(s['prefillChunkTokens'], 'prefillChunkTokens', 1, LIMITS.stepTokensMax),
      stepTokenBudget: int(s['stepTokenBudget'], 'stepTokenBudget', 1, LIMITS.stepTokensMax),
      promptStepMs: int(s['promptStepMs'], 'promptStepMs', 1, LIMITS.promptStepMsMax),
      prefixCachePages: int(s['prefixCachePages'], 'prefixCachePages', 0, LIMITS.kvPagesMax),
    },
    controlListen: str(c['controlListen'], 'controlListen'),
    ...optional('transferListen'),
    ...optional('transferAdvertise'),
    transferTimeoutMs: ms(c, 'transferTimeoutMs'),
    idleTimeoutMs: ms(c, 'idleTimeoutMs'),
    handshakeTimeoutMs: ms(c, 'handshakeTimeoutMs'),
    incidentsDb: str(c['incidentsDb'], 'incidentsDb'),
    logLevel: logLevel as LogLevel,
    ...(c['drainTimeoutMs'] !== undefined ? { drainTimeoutMs: ms(c, 'drainTimeoutMs') } : {}),
  };
  const secretHex = str(m['secretHex'], 'secretHex');
  if (!/^[0-9a-f]+$/.test(secretHex)) bad('secretHex', 'is not hex');
  return { kind: 'start', config, secretHex };
}

function bad(field: string, why: string): never {
  throw new KvfenceError('invalid_argument', `worker start message: ${field} ${why}`);
}

function obj(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) bad(field, 'is not an object');
  return value as Record<string, unknown>;
}

function str(value: unknown, field: string): string {
  if (typeof value !== 'string' || value === '' || value.length > 4096) bad(field, 'is not a string');
  return value;
}

function bool(value: unknown, field: string): boolean {
  if (typeof value !== 'boolean') bad(field, 'is not a boolean');
  return value;
}

function int(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    bad(field, `is not an integer from ${min} to ${max}`);
  return value;
}

/** A worker's config with what it runs on: loaded once by whoever starts it (the CLI, a supervised child, a test). */
export interface WorkerRuntime {
  config: WorkerConfig;
  model: LoadedModel;
  backend: Backend;
  /** listens for control (and decode: transfer) connections; prefill connects to decode workers with it */
  transport: TransferTransport;
  incidents: IncidentStore;
  log: LogSink;
}

export interface RunningWorker {
  role: WorkerRole;
  name: string;
  controlAddress: string;
  transferAddress: string | undefined;
  capacity: CapacityProof;
  /**
   * SIGTERM: tells every connected gateway `draining` (they route nothing new here), stops taking connections, serves
   * what it holds until every gateway has closed its connection (each does once it has nothing here) or `deadlineMs`
   * passes (then what is left fails), then closes.
   */
  drain(deadlineMs: number): Promise<void>;
  /** at once: every connection and what it holds ends (the gateways fail those requests with 503) */
  close(): Promise<void>;
}

/** The first message of every control connection: who this worker is and what it proved. */
export function workerHello(runtime: WorkerRuntime, provenContext: number, transferAddress?: string): WorkerHello {
  const c = runtime.model.config;
  return {
    role: runtime.config.role,
    name: runtime.config.name,
    modelName: runtime.config.modelName,
    vocabSize: c.vocabSize,
    layerCount: c.layerCount,
    kvDim: c.kvHeadCount * c.headDim,
    pageSize: runtime.config.settings.pageSize,
    provenContext,
    ...(transferAddress !== undefined ? { transferAddress } : {}),
    ...(runtime.config.role === 'decode' ? { endChoice: true as const } : {}),
    ...(runtime.config.role === 'prefill' && runtime.config.settings.prefixCachePages > 0
      ? { prefixCachePages: runtime.config.settings.prefixCachePages }
      : {}),
  };
}
