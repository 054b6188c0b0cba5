/** A worker's config as the in-process cluster tests start them (`startWorker`, with the gateway in the same process). */
import { join } from 'node:path';
import { pino } from 'pino';
import type { WorkerRole } from '../../src/cluster/control-protocol.js';
import { type RunningWorker, WORKER_DEFAULTS, type WorkerConfig } from '../../src/cluster/worker-config.js';
import type { WorkerSettings } from '../../src/engine/worker-kv.js';
import { IncidentStore } from '../../src/incidents/incident-store.js';
import { startWorker } from '../../src/launch/start-worker.js';
import type { LoadedModel } from '../../src/model/load-model.js';
import { MODEL_ID } from '../serving/serve-helpers.js';

/**
 * The reference backend, loopback control (and, for decode, transfer) listeners, the transfer bounds of the
 * disaggregated tests (test/disagg/cluster-helpers.ts), silent logs; the incident store is the caller's own.
 */
export function inProcessWorkerConfig(
  role: WorkerRole,
  name: string,
  modelPath: string,
  settings: WorkerSettings,
  dir: string,
): WorkerConfig {
  return {
    role,
    name,
    modelPath,
    modelName: MODEL_ID,
    backend: 'reference',
    settings,
    controlListen: '127.0.0.1:0',
    ...(role === 'decode' ? { transferListen: '127.0.0.1:0' } : {}),
    transferTimeoutMs: 10_000,
    idleTimeoutMs: 3_000,
    handshakeTimeoutMs: WORKER_DEFAULTS.handshakeTimeoutMs,
    incidentsDb: join(dir, 'unused.sqlite'),
    logLevel: 'silent',
  };
}

/**
 * Workers of one model started in this process as the tests' gateway finds them: each with `inProcessWorkerConfig`,
 * the cluster's `secret`, and one incident store for all of them; `close` closes every worker, then the store.
 */
export class InProcessWorkers {
  /** every worker started and not yet taken out by the test (a test that closes one itself takes it out) */
  readonly started: RunningWorker[] = [];
  private readonly incidents: IncidentStore;

  constructor(
    private readonly model: LoadedModel,
    private readonly settings: WorkerSettings,
    readonly secret: Uint8Array,
    private readonly dir: string,
  ) {
    this.incidents = new IncidentStore(join(dir, 'incidents.sqlite'));
  }

  async start(role: WorkerRole, name: string): Promise<RunningWorker> {
    const config = inProcessWorkerConfig(role, name, this.model.path, this.settings, this.dir);
    const deps = { model: this.model, incidents: this.incidents, log: pino({ level: 'silent' }) };
    const worker = await startWorker(config, this.secret, deps);
    this.started.push(worker);
    return worker;
  }

  async close(): Promise<void> {
    for (const worker of this.started) await worker.close();
    this.incidents.close();
  }
}
