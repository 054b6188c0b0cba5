/**
 * A disaggregated cluster on the tiny test model for the end-to-end tests: the gateway in this process, prefill and
 * decode workers as supervised child processes (`kvfence prefill|decode`) on loopback, exactly as
 * `kvfence serve --disaggregated` runs them.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import type { PoolStats } from '../../src/cluster/control-protocol.js';
import type { WorkerSettings } from '../../src/engine/worker-kv.js';
import { type RunningCluster, startDisaggregatedServer } from '../../src/launch/cluster-server.js';
import type { ServeConfig } from '../../src/launch/serve-config.js';
import type { TestWorkerPlan } from '../helpers/test-worker-entry.js';
import type { IsolationTarget } from '../serving/isolation-suite.js';
import { MODEL_ID, post, type Served, testServeConfig, waitForAsync, writeKeyFile } from '../serving/serve-helpers.js';

export interface TestClusterOptions {
  serve?: Partial<ServeConfig>;
  prefill?: number;
  decode?: number;
  prefillSettings?: Partial<WorkerSettings>;
  decodeSettings?: Partial<WorkerSettings>;
  /** the gateway's bound on a silent worker */
  workerSilenceMs?: number;
  /** every worker runs the test worker program with this plan (faults, an unproven capacity) */
  plan?: TestWorkerPlan;
}

export async function startTestCluster(options: TestClusterOptions = {}): Promise<RunningCluster> {
  return startDisaggregatedServer({
    serve: testServeConfig(options.serve),
    prefillCount: options.prefill ?? 1,
    decodeCount: options.decode ?? 1,
    ...(options.prefillSettings !== undefined ? { prefillSettings: options.prefillSettings } : {}),
    ...(options.decodeSettings !== undefined ? { decodeSettings: options.decodeSettings } : {}),
    transferTimeoutMs: 10_000,
    idleTimeoutMs: 3_000,
    ...(options.workerSilenceMs !== undefined ? { workerSilenceMs: options.workerSilenceMs } : {}),
    workerStdout: 'ignore',
    ...(options.plan !== undefined
      ? {
          workerProgram: {
            path: fileURLToPath(new URL('../helpers/test-worker-entry.js', import.meta.url)),
            args: [JSON.stringify(options.plan)],
          },
        }
      : {}),
  });
}

/** Every worker's pool stats, fresh (prefill workers first); a worker that is down fails the assertion. */
/**
 * The heartbeat tests' cluster: one prefill and one decode worker (running `plan`, when given) behind a gateway that
 * takes a worker silent for `silenceMs` as gone; one tenant, `a`.
 */
export function startHeartbeatCluster(silenceMs: number, plan?: TestWorkerPlan): Promise<RunningCluster> {
  return startTestCluster({
    prefill: 1,
    decode: 1,
    workerSilenceMs: silenceMs,
    ...(plan !== undefined ? { plan } : {}),
    serve: { apiKeysPath: writeKeyFile(['a']) },
  });
}

export async function poolStats(cluster: RunningCluster): Promise<PoolStats[]> {
  const stats = await cluster.dispatcher.poolStats();
  return stats.map((s, i) => {
    assert.ok(s !== undefined, `worker ${cluster.workers[i]?.name} answers`);
    return s;
  });
}

async function whole(cluster: RunningCluster): Promise<boolean> {
  const stats = await cluster.dispatcher.poolStats();
  return stats.every((s) => s !== undefined && s.pagesFree === s.pagesTotal && s.running === 0 && s.waiting === 0);
}

/** Every pool on every side gets back to all pages free (frees on the far side are asynchronous: bounded wait). */
export async function assertClusterPoolsWhole(cluster: RunningCluster, timeoutMs = 10_000): Promise<void> {
  await waitForAsync(() => whole(cluster), 'every worker pool to be whole again', timeoutMs).catch(async (error) => {
    throw new Error(`${(error as Error).message}: ${JSON.stringify(await cluster.dispatcher.poolStats())}`);
  });
}

export function clusterTarget(cluster: RunningCluster, pagesPerPool: number): IsolationTarget {
  return {
    url: cluster.url,
    pagesTotal: pagesPerPool * cluster.workers.length,
    reservationCount: async () => (await poolStats(cluster)).reduce((sum, s) => sum + s.reservations, 0),
    idle: () => whole(cluster),
    assertPoolsWhole: () => assertClusterPoolsWhole(cluster),
    close: () => cluster.close(),
  };
}

export interface GreedyOutcome {
  status: number;
  /** the completion's text, or the error body when the status is not 200 */
  text: string;
  logprobs: number[];
}

/** A greedy completion of token ids with its logprobs, as a client sees it (for answers compared with solo runs). */
export async function greedyCompletion(
  server: Served,
  tenant: string,
  prompt: number[],
  maxTokens: number,
): Promise<GreedyOutcome> {
  const r = await post(
    server,
    '/v1/completions',
    { model: MODEL_ID, prompt, max_tokens: maxTokens, temperature: 0, logprobs: 1 },
    tenant,
  );
  const choice = (r.json as { choices?: { text: string; logprobs: { token_logprobs: number[] } }[] }).choices?.[0];
  return {
    status: r.status,
    text: choice?.text ?? JSON.stringify(r.json),
    logprobs: choice?.logprobs.token_logprobs ?? [],
  };
}
