// A worker that stops answering without closing its connections (SIGSTOP here: a wedged process, or a host cut off
// without FIN or RST) is found by the gateway's heartbeat within its silence bound: the request on it fails with 503
// worker_unavailable instead of waiting for the request deadline, the worker leaves routing and /health, and once it
// thaws the link reconnects and it serves again with its pages whole.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { complete, tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post, waitForAsync } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 2_000;
let cluster: RunningCluster;
let frozen: string | undefined;

before(async () => {
  cluster = await startHeartbeatCluster(SILENCE_MS);
});
after(async () => {
  if (frozen !== undefined) cluster?.supervisor.kill(frozen, 'SIGCONT');
  await cluster?.close();
});

const routable = (name: string) => cluster.dispatcher.workers().find((w) => w.name === name)?.up === true;

test('a frozen decode worker is taken as gone within the silence bound, and serves again once it thaws', async () => {
  const prompt = tokens(20, 1);
  const solo = await complete(cluster, 'a', prompt, 5);
  const decode = cluster.workers.find((w) => w.role === 'decode')!.name;
  frozen = decode;
  cluster.supervisor.kill(decode, 'SIGSTOP');
  const started = performance.now();
  const r = await post(cluster, '/v1/completions', { model: MODEL_ID, prompt, max_tokens: 5, temperature: 0 }, 'a');
  const ms = performance.now() - started;
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.equal((r.json as { error: { code: string } }).error.code, 'worker_unavailable');
  assert.ok(ms < SILENCE_MS * 3, `failed after ${ms.toFixed(0)} ms, not at the request deadline`);
  assert.equal(routable(decode), false, 'the frozen worker takes no new request');
  const health = (await (await fetch(`${cluster.url}/health`)).json()) as { workers: { name: string; up: boolean }[] };
  assert.equal(health.workers.find((w) => w.name === decode)?.up, false, '/health says it is down');

  cluster.supervisor.kill(decode, 'SIGCONT');
  frozen = undefined;
  await waitForAsync(async () => routable(decode), 'the thawed worker to be routable again', 30_000);
  assert.deepEqual(await complete(cluster, 'a', prompt, 5), solo, 'served again, the same answer');
  await assertClusterPoolsWhole(cluster, 30_000);
});
