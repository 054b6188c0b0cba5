/**
 * The two deployments the live audit runs against, on the tiny test model with the test suites' settings: the
 * colocated server in this process (test/serving/serve-helpers.ts) and the disaggregated cluster (gateway here,
 * 1 prefill + 1 decode child process; test/disagg/cluster-helpers.ts).
 */
import type { ServeConfig } from '../../src/launch/serve-config.js';
import { assertClusterPoolsWhole, startTestCluster } from '../disagg/cluster-helpers.js';
import { testModelFile } from '../helpers/models.js';
import { assertPoolWhole, SERVING_MODEL, startTestServer, waitFor } from '../serving/serve-helpers.js';

/**
 * The serving tests' model with a 512-token context: the auditor's prompts are 120-450 tokens on this tokenizer
 * (~4.5 tokens a word), so a smaller context would refuse its interruption prompts before any delta and leave its
 * context probe nothing to measure. 512 pages of 8 KiB: room for 16 full-context requests at once.
 */
export function liveServeSettings(serverKeysPath: string): Partial<ServeConfig> {
  return {
    modelPath: testModelFile({ ...SERVING_MODEL, contextLength: 512 }),
    apiKeysPath: serverKeysPath,
    kvPages: 512,
  };
}

/** `colocated-cache`: the colocated server with a prefix cache of 16 pages a tenant */
export type DeploymentKind = 'colocated' | 'colocated-cache' | 'disaggregated';

export interface LiveDeployment {
  url: string;
  /** every pool whole again (but for cached prefix pages) and no isolation incident recorded (bounded waits) */
  assertIdle(): Promise<void>;
  /** a line on what the deployment's prefix cache did, if it has one */
  cacheSummary?(): string;
  close(): Promise<void>;
}

export async function startLiveDeployment(kind: DeploymentKind, serverKeysPath: string): Promise<LiveDeployment> {
  if (kind !== 'disaggregated') {
    const prefixCachePages = kind === 'colocated-cache' ? 16 : 0;
    const server = await startTestServer({ ...liveServeSettings(serverKeysPath), prefixCachePages });
    const cache = server.worker.prefixCache;
    return {
      url: server.url,
      ...(cache !== undefined
        ? { cacheSummary: () => `prefix cache: ${cache.reusedPages} pages reused, ${cache.evictedPages} evicted` }
        : {}),
      async assertIdle() {
        const pool = server.worker.pool;
        const cached = () => cache?.pageCount ?? 0;
        await waitFor(() => pool.freePageCount + cached() === pool.pageCount, 'the pool to be whole again', 10_000);
        if (cache === undefined) assertPoolWhole(server);
        else if (pool.checkConservation().active !== cache.pageCount) throw new Error('pages held besides the cache');
        const incidents = server.incidents.list();
        if (incidents.length > 0) throw new Error(`isolation incidents recorded: ${JSON.stringify(incidents)}`);
      },
      close: () => server.close(),
    };
  }
  const cluster = await startTestCluster({ serve: liveServeSettings(serverKeysPath) });
  return {
    url: cluster.url,
    assertIdle: () => assertClusterPoolsWhole(cluster),
    close: () => cluster.close(),
  };
}
