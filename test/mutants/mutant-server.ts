/**
 * The mutation self-test's only entry point: a colocated kvfence assembled in-process exactly as `startServer`
 * (src/cli/serve-command.ts) assembles it, plus the seeded isolation faults of one mutant (README.md). Production
 * code never builds a server this way: `kvfence serve` has no flag, environment variable or config field that reaches
 * the `mutants` options, and no module under src/ imports this folder (mutants-unreachable.test.ts checks both).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { pino } from 'pino';
import { ColocatedWorker } from '../../src/colocated/colocated-worker.js';
import { selectBackend } from '../../src/compute/select-backend.js';
import type { EngineMutants } from '../../src/engine/engine.js';
import type { GatewayMutants } from '../../src/gateway/completion-run.js';
import { servedModel } from '../../src/gateway/served-model.js';
import { buildGateway } from '../../src/gateway/server.js';
import { loadKeyFile, TenantDirectory } from '../../src/gateway/tenants.js';
import { IncidentStore } from '../../src/incidents/incident-store.js';
import type { PagePoolMutants } from '../../src/kv/page-pool.js';
import type { PrefixCacheMutants } from '../../src/kv/prefix-cache.js';
import { loadModel } from '../../src/model/load-model.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { SERVING_MODEL } from '../serving/serve-helpers.js';

export const MUTANT_NAMES = ['placeholder', 'use_after_free', 'stale_epoch', 'abort_as_success'] as const;
export type MutantName = (typeof MUTANT_NAMES)[number];

/** Every seeded fault of a mutant, by the component it is injected into. */
export interface Mutants {
  gateway?: GatewayMutants;
  engine?: EngineMutants;
  pool?: PagePoolMutants;
  prefixCache?: PrefixCacheMutants;
}

/** What each mutant turns on: the check it removes plus the ordinary fault that check exists to catch (README.md). */
export const MUTANTS: Record<MutantName, Mutants> = {
  placeholder: { gateway: { oversizePlaceholder: true } },
  use_after_free: { pool: { ownershipUnchecked: true }, engine: { cancelLeavesRunning: true } },
  stale_epoch: { pool: { epochUnchecked: true }, prefixCache: { evictionKeepsIndex: true } },
  abort_as_success: { engine: { abortAsSuccess: true } },
};

/** Server settings a mutant needs so the auditor's normal traffic meets its fault (defaults: the live audit's). */
export interface MutantServerSettings {
  kvPages: number;
  runningMax: number;
  queueTimeoutMs: number;
  waitingMax: number;
  /** pages each tenant's prefix cache may hold (0: none) */
  prefixCachePages: number;
}

export const MUTANT_SERVER_DEFAULTS: MutantServerSettings = {
  kvPages: 512,
  runningMax: 16,
  queueTimeoutMs: 20_000,
  waitingMax: 64,
  prefixCachePages: 0,
};

/** The engine settings both mutant-server.ts and mutant-cluster.ts run with (field names as both option types spell them). */
export function mutantEngineSettings(s: MutantServerSettings) {
  return {
    backend: selectBackend('reference', () => {}),
    pageSize: 16,
    pageCount: s.kvPages,
    clampContext: false,
    runningMax: s.runningMax,
    waitingMax: s.waitingMax,
    queueTimeoutMs: s.queueTimeoutMs,
    prefillChunkTokens: 64,
    stepTokenBudget: 256,
  };
}

export interface MutantServer {
  url: string;
  worker: ColocatedWorker;
  incidents: IncidentStore;
  checkExercised(): void;
  close(): Promise<void>;
}

const dir = tempDirectory('kvfence-mutants-');
let servers = 0;

/** A colocated server on the live audit's model (512-token context) with `mutants` seeded; `{}`: the real server. */
export async function startMutantServer(
  mutants: Mutants,
  serverKeysPath: string,
  settings: Partial<MutantServerSettings> = {},
): Promise<MutantServer> {
  const s = { ...MUTANT_SERVER_DEFAULTS, ...settings };
  const model = loadModel(testModelFile({ ...SERVING_MODEL, contextLength: 512 }));
  const logger = pino({ level: 'silent' });
  const tenants = new TenantDirectory(loadKeyFile(serverKeysPath));
  const incidents = new IncidentStore(join(dir, `incidents-${servers++}.sqlite`));
  const worker = new ColocatedWorker({
    model,
    ...mutantEngineSettings(s),
    tenantLimits: { defaults: { concurrentRequestsMax: 64, kvPagesMax: s.kvPages }, overrides: new Map() },
    incidents,
    log: logger,
    prefixCachePages: s.prefixCachePages,
    mutants: {
      ...(mutants.pool !== undefined ? { pool: mutants.pool } : {}),
      ...(mutants.engine !== undefined ? { engine: mutants.engine } : {}),
      ...(mutants.prefixCache !== undefined ? { prefixCache: mutants.prefixCache } : {}),
    },
  });
  const gateway = buildGateway({
    model: servedModel(model, 'tiny-test'),
    worker,
    tenants,
    logger,
    requestTimeoutMs: 60_000,
    retryAfterS: 1,
    ...(mutants.gateway !== undefined ? { mutants: mutants.gateway } : {}),
  });
  const url = await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    worker,
    incidents,
    checkExercised() {
      const cache = worker.prefixCache;
      if (cache === undefined) return;
      assert.ok(
        cache.reusedPages > 0 && cache.evictedPages > 0,
        `the audit exercised the prefix cache: ${cache.reusedPages} pages reused, ${cache.evictedPages} evicted`,
      );
    },
    async close() {
      await worker.close();
      await gateway.app.close();
      incidents.close();
    },
  };
}
