/**
 * The disaggregated counterpart of mutant-server.ts: one prefill worker, one decode worker and the gateway, all in this
 * process, started by `startWorker` and `startGateway` (src/launch/) as `kvfence prefill`, `decode` and `gateway` start
 * them, on the colocated mutant server's model and settings, with the parts of one mutant (seeded-faults.ts).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pino } from 'pino';
import type { WorkerRole } from '../../src/cluster/control-protocol.js';
import type { RunningWorker, WorkerConfig } from '../../src/cluster/worker-config.js';
import { IncidentStore } from '../../src/incidents/incident-store.js';
import { startGateway } from '../../src/launch/gateway-server.js';
import { startWorker } from '../../src/launch/start-worker.js';
import { inProcessWorkerConfig } from '../helpers/in-process-worker.js';
import { tempDirectory } from '../helpers/temp.js';
import { MODEL_ID } from '../serving/serve-helpers.js';
import { MUTANT_SERVER_DEFAULTS, mutantModelPath, mutantWorkerSettings } from './mutant-server.js';
import { type ClusterFaults, seededWorkerParts } from './seeded-faults.js';

/**
 * (d) `checksum_unchecked`: I5's page checksum comparison removed at decode, plus the fault it exists to catch: a
 * prefill worker staging every job's pages in one shared area, so overlapping sends put another request's KV on the
 * wire under the checksums sealed for this request's pages (README.md).
 */
export const CHECKSUM_UNCHECKED: ClusterFaults = { sharedStaging: true, checksumUnchecked: true };

export interface MutantCluster {
  url: string;
  /** both workers record into this one store */
  incidents: IncidentStore;
  close(): Promise<void>;
}

const dir = tempDirectory('kvfence-mutant-cluster-');
let clusters = 0;

function workerConfig(role: WorkerRole): WorkerConfig {
  return inProcessWorkerConfig(role, role, mutantModelPath(), mutantWorkerSettings(MUTANT_SERVER_DEFAULTS), dir);
}

/** A disaggregated kvfence on the live audit's model with `faults` seeded; `{}`: the real cluster. */
export async function startMutantCluster(faults: ClusterFaults, serverKeysPath: string): Promise<MutantCluster> {
  const secret = new Uint8Array(randomBytes(32));
  const incidents = new IncidentStore(join(dir, `incidents-${clusters++}.sqlite`));
  const deps = { parts: seededWorkerParts(faults), incidents, log: pino({ level: 'silent' }) };
  const workers: RunningWorker[] = [];
  const closeWorkers = async () => {
    for (const w of workers.splice(0)) await w.close();
  };
  try {
    workers.push(await startWorker(workerConfig('prefill'), secret, deps));
    workers.push(await startWorker(workerConfig('decode'), secret, deps));
    const gateway = await startGateway({
      modelPath: mutantModelPath(),
      modelName: MODEL_ID,
      host: '127.0.0.1',
      port: 0,
      apiKeysPath: serverKeysPath,
      tenantConcurrentMax: 64,
      clampContext: false,
      queueTimeoutMs: MUTANT_SERVER_DEFAULTS.queueTimeoutMs,
      prefill: [workers[0]!.controlAddress],
      decode: [workers[1]!.controlAddress],
      secret,
      requestTimeoutMs: 60_000,
      connectTimeoutMs: 10_000,
      logLevel: 'silent',
    });
    return {
      url: gateway.url,
      incidents,
      async close() {
        await gateway.close();
        await closeWorkers();
        incidents.close();
      },
    };
  } catch (error) {
    await closeWorkers();
    incidents.close();
    throw error;
  }
}
