/**
 * The mutation self-test's colocated server: `startServer` itself (src/launch/colocated-server.ts), handed the parts
 * of one mutant (seeded-faults.ts) instead of production's. Production code never builds a server this way: no
 * `kvfence` command, flag, variable or config field reaches the parts, and no module under src/ imports this folder
 * (mutants-unreachable.test.ts checks both).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ColocatedWorker } from '../../src/colocated/colocated-worker.js';
import type { IncidentStore } from '../../src/incidents/incident-store.js';
import { startServer } from '../../src/launch/colocated-server.js';
import { SERVE_DEFAULTS } from '../../src/launch/serve-config.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { SERVING_MODEL } from '../serving/serve-helpers.js';
import { type SeededFaults, seededParts } from './seeded-faults.js';

export const MUTANT_NAMES = ['placeholder', 'use_after_free', 'stale_epoch', 'abort_as_success'] as const;
export type MutantName = (typeof MUTANT_NAMES)[number];

/** What each mutant turns on: the check it removes plus the ordinary fault that check exists to catch (README.md). */
export const MUTANTS: Record<MutantName, SeededFaults> = {
  placeholder: { placeholder: true },
  use_after_free: { pool: { ownershipUnchecked: true }, engine: { cancelLeavesRunning: true } },
  stale_epoch: { pool: { epochUnchecked: true }, staleIndex: true },
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

/** The live audit's model (512-token context), as both mutant servers serve it. */
export function mutantModelPath(): string {
  return testModelFile({ ...SERVING_MODEL, contextLength: 512 });
}

/** The engine settings both mutant-server.ts and mutant-cluster.ts run with. */
export function mutantWorkerSettings(s: MutantServerSettings) {
  return {
    pageSize: 16,
    pageCount: s.kvPages,
    clampContext: false,
    runningMax: s.runningMax,
    waitingMax: s.waitingMax,
    queueTimeoutMs: s.queueTimeoutMs,
    prefillChunkTokens: 64,
    stepTokenBudget: 256,
    promptStepMs: SERVE_DEFAULTS.promptStepMs,
    prefixCachePages: s.prefixCachePages,
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

/** A colocated server on the live audit's model with `faults` seeded; `{}`: the real server. */
export async function startMutantServer(
  faults: SeededFaults,
  serverKeysPath: string,
  settings: Partial<MutantServerSettings> = {},
): Promise<MutantServer> {
  const s = { ...MUTANT_SERVER_DEFAULTS, ...settings };
  const w = mutantWorkerSettings(s);
  const server = await startServer(
    {
      modelPath: mutantModelPath(),
      modelName: 'tiny-test',
      host: '127.0.0.1',
      port: 0,
      backend: 'reference',
      apiKeysPath: serverKeysPath,
      kvPages: w.pageCount,
      pageSize: w.pageSize,
      clampContext: false,
      runningMax: w.runningMax,
      waitingMax: w.waitingMax,
      queueTimeoutMs: w.queueTimeoutMs,
      prefillChunk: w.prefillChunkTokens,
      stepTokens: w.stepTokenBudget,
      promptStepMs: w.promptStepMs,
      tenantConcurrentMax: 64,
      prefixCachePages: s.prefixCachePages,
      incidentsDb: join(dir, `incidents-${servers++}.sqlite`),
      requestTimeoutMs: 60_000,
      logLevel: 'silent',
    },
    () => {},
    seededParts(faults),
  );
  return {
    url: server.url,
    worker: server.worker,
    incidents: server.incidents,
    checkExercised() {
      const cache = server.worker.prefixCache;
      if (cache === undefined) return;
      assert.ok(
        cache.reusedPages > 0 && cache.evictedPages > 0,
        `the audit exercised the prefix cache: ${cache.reusedPages} pages reused, ${cache.evictedPages} evicted`,
      );
    },
    close: () => server.close(),
  };
}
