// The noninterference suite of test/serving/isolation.test.ts, unchanged, against a disaggregated cluster (1 prefill
// + 1 decode child process): the same bit-identical answers alone and under load, the same early 400s with no page
// reserved on any worker, every page of both pools free after cancellations mid-stream.
import { noninterferenceSuite } from '../serving/isolation-suite.js';
import { clusterTarget, startTestCluster } from './cluster-helpers.js';

noninterferenceSuite('disaggregated', async (keyFile) => {
  const cluster = await startTestCluster({
    serve: { apiKeysPath: keyFile, kvPages: 160, runningMax: 16, prefillChunk: 24, stepTokens: 96 },
  });
  return clusterTarget(cluster, 160);
});
