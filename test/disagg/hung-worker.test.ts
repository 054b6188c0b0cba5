// A worker that hangs without exiting (SIGSTOP here: a deadlock, an endless loop, a native call that never returns)
// is taken as gone by the gateway's heartbeat; `serve --disaggregated` then kills it once it has been silent three
// silence bounds with its process still running, and the supervisor starts it again (src/launch/hung-workers.ts).
// Before, only a worker that exited was restarted: a hung one left its role without a worker, 503 for good.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { complete, tokens } from '../serving/isolation-suite.js';
import { waitForAsync } from '../serving/serve-helpers.js';
import { startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 1_000;
let cluster: RunningCluster;

before(async () => {
  cluster = await startHeartbeatCluster(SILENCE_MS);
});
after(async () => {
  await cluster?.close();
});

test('a hung decode worker is killed and restarted, and the cluster serves again', async () => {
  const prompt = tokens(20, 2);
  const solo = await complete(cluster, 'a', prompt, 5);
  const decode = cluster.workers.find((w) => w.role === 'decode')!.name;
  const hung = cluster.supervisor.pid(decode)!;
  cluster.supervisor.kill(decode, 'SIGSTOP');
  const restarted = () => cluster.supervisor.status().find((s) => s.name === decode)!.restarts === 1;
  await waitForAsync(async () => restarted(), 'the hung worker to be restarted', 30_000);
  assert.notEqual(cluster.supervisor.pid(decode), hung, 'a new process');
  await waitForAsync(
    async () => cluster.dispatcher.workers().find((w) => w.name === decode)?.up === true,
    'the gateway to reach the restarted worker',
    30_000,
  );
  assert.deepEqual(await complete(cluster, 'a', prompt, 5), solo, 'served again, the same answer');
});
