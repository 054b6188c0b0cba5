/**
 * The disaggregated counterpart of mutant-server.ts: one prefill worker, one decode worker and the gateway, all in this
 * process, assembled as `kvfence prefill`, `kvfence decode` and `kvfence gateway` assemble them (startWorkerProcess,
 * startGateway) on the colocated mutant server's model and settings, plus the seeded faults of one mutant. Production
 * never builds a cluster this way: the CLI passes no `mutants` to startWorkerProcess (mutants-unreachable.test.ts).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pino } from 'pino';
import { startGateway } from '../../src/cli/gateway-command.js';
import type { WorkerRole } from '../../src/cluster/control-protocol.js';
import { type RunningWorker, startWorkerProcess, type WorkerProcessConfig } from '../../src/cluster/worker-process.js';
import { IncidentStore } from '../../src/incidents/incident-store.js';
import { loadModel } from '../../src/model/load-model.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { MODEL_ID, SERVING_MODEL } from '../serving/serve-helpers.js';
import { MUTANT_SERVER_DEFAULTS, mutantEngineSettings } from './mutant-server.js';

export type ClusterMutants = NonNullable<WorkerProcessConfig['mutants']>;

/**
 * (d) `digest_unchecked`: I5's digest comparison removed at decode, plus the fault it exists to catch: a prefill
 * worker staging every job's pages in one shared area, so overlapping sends put another request's KV on the wire
 * under correct per-page checksums (README.md).
 */
export const DIGEST_UNCHECKED: ClusterMutants = {
  prefill: { sharedStaging: true },
  receiver: { digestUnchecked: true },
};

export interface MutantCluster {
  url: string;
  /** both workers record into this one store */
  incidents: IncidentStore;
  close(): Promise<void>;
}

const dir = tempDirectory('kvfence-mutant-cluster-');
let clusters = 0;

/** Transfer bounds of the disaggregated tests (cluster-helpers.ts). */
const TRANSFER = { transferTimeoutMs: 10_000, idleTimeoutMs: 3_000, handshakeTimeoutMs: 5_000 };

function workerConfig(
  role: WorkerRole,
  secret: Uint8Array,
  incidents: IncidentStore,
  mutants: ClusterMutants,
): WorkerProcessConfig {
  const s = MUTANT_SERVER_DEFAULTS;
  return {
    role,
    name: role,
    model: loadModel(modelPath()),
    modelName: MODEL_ID,
    ...mutantEngineSettings(s),
    tenantConcurrentMax: 64,
    tenantKvPagesMax: s.kvPages,
    controlListen: '127.0.0.1:0',
    ...(role === 'decode' ? { transferListen: '127.0.0.1:0' } : {}),
    ...TRANSFER,
    secret,
    incidents,
    log: pino({ level: 'silent' }),
    env: {}, // never process.env: no test-fault or capacity-skip variable reaches these workers
    mutants,
  };
}

/** The live audit's model (512-token context), as mutant-server.ts serves it. */
function modelPath(): string {
  return testModelFile({ ...SERVING_MODEL, contextLength: 512 });
}

/** A disaggregated kvfence on the live audit's model with `mutants` seeded; `{}`: the real cluster. */
export async function startMutantCluster(mutants: ClusterMutants, serverKeysPath: string): Promise<MutantCluster> {
  const secret = new Uint8Array(randomBytes(32));
  const incidents = new IncidentStore(join(dir, `incidents-${clusters++}.sqlite`));
  const workers: RunningWorker[] = [];
  const closeWorkers = async () => {
    for (const w of workers.splice(0)) await w.close();
  };
  try {
    workers.push(await startWorkerProcess(workerConfig('prefill', secret, incidents, mutants)));
    workers.push(await startWorkerProcess(workerConfig('decode', secret, incidents, mutants)));
    const gateway = await startGateway({
      modelPath: modelPath(),
      modelName: MODEL_ID,
      host: '127.0.0.1',
      port: 0,
      apiKeysPath: serverKeysPath,
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
