// The gateway's own thread held (a long GC pause, a slow synchronous job) past the silence bound: the workers kept
// answering the heartbeat meanwhile, so none of them is taken as gone once the thread is free.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { complete, tokens } from '../serving/isolation-suite.js';
import { startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 1_000;
let cluster: RunningCluster;

before(async () => {
  cluster = await startHeartbeatCluster(SILENCE_MS);
});
after(async () => {
  await cluster?.close();
});

test('a gateway whose own thread was held past the silence bound keeps its workers', async () => {
  await complete(cluster, 'a', tokens(20, 1), 3);
  let downs = 0;
  const watch = setInterval(() => {
    if (!cluster.dispatcher.workers().every((w) => w.up)) downs++;
  }, 1);
  const until = performance.now() + 3 * SILENCE_MS;
  while (performance.now() < until) {} // the gateway's thread is held
  await new Promise((resolve) => setTimeout(resolve, SILENCE_MS / 2));
  clearInterval(watch);
  assert.equal(downs, 0, 'a worker was taken as gone');
});
