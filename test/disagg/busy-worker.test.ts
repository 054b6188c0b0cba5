// A worker that is busy but alive (one long forward pass on its thread: a big prompt's chunk on a big model) answers
// nothing while it computes; the gateway's heartbeat must not take it for a frozen one and fail its requests.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 1_000;
let cluster: RunningCluster;

before(async () => {
  cluster = await startHeartbeatCluster(SILENCE_MS, { promptPassBusyMs: 3 * SILENCE_MS });
});
after(async () => {
  await cluster?.close();
});

test('a prefill worker busy in one pass longer than the silence bound is not taken as gone', async () => {
  // the first pass is foreseen from the one the worker timed before it served, the second from the first
  for (const seed of [1, 2]) {
    const r = await post(
      cluster,
      '/v1/completions',
      { model: MODEL_ID, prompt: tokens(20, seed), max_tokens: 3, temperature: 0 },
      'a',
    );
    assert.equal(r.status, 200, JSON.stringify(r.json));
  }
  assert.ok(
    cluster.dispatcher.workers().every((w) => w.up),
    'no worker was taken as gone',
  );
  await assertClusterPoolsWhole(cluster, 30_000);
});
