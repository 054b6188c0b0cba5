// Rolling restarts across real processes (2 prefill + 2 decode children): under steady load from three tenants, each
// worker in turn gets SIGTERM — it tells the gateway it is draining, serves what it holds, exits 0, and its supervisor
// starts its successor, which the gateway picks up. Not one request fails, not even with an honest error; each gets
// the answer it gets alone (I7); every pool ends whole. Then the gateway itself drains: a stream in flight when it
// is told to stop still ends with [DONE], and new connections are refused. (A kill -9 still fails its requests
// honestly: crash.test.ts.)
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { tokens } from '../serving/isolation-suite.js';
import { keyFor, MODEL_ID, waitFor, waitForAsync, writeKeyFile } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, type GreedyOutcome, greedyCompletion, startTestCluster } from './cluster-helpers.js';

const TENANTS = ['t0', 't1', 't2'];
const PROMPTS = [tokens(24, 11), tokens(40, 12), tokens(57, 13), tokens(18, 14)];
const MAX_TOKENS = 24;

let cluster: RunningCluster;
let closed = false;
before(async () => {
  cluster = await startTestCluster({ prefill: 2, decode: 2, serve: { apiKeysPath: writeKeyFile(TENANTS) } });
});
after(async () => {
  if (!closed) await cluster?.close();
});

const ask = (tenant: string, prompt: number[]) => greedyCompletion(cluster, tenant, prompt, MAX_TOKENS);

test('every worker restarted in turn under load: no request fails, answers as alone, pools whole', async () => {
  const solo = await Promise.all(PROMPTS.map((p) => ask('t0', p)));
  for (const s of solo) assert.equal(s.status, 200, s.text);

  const outcomes: { prompt: number; outcome: GreedyOutcome }[] = [];
  let inFlight = 0;
  let running = true;
  // two requests at a time per tenant, back to back
  const load = TENANTS.flatMap((tenant, t) =>
    [0, 1].map(async (lane) => {
      for (let i = t + lane; running; i++) {
        const prompt = i % PROMPTS.length;
        inFlight++;
        const outcome = await ask(tenant, PROMPTS[prompt]!);
        inFlight--;
        outcomes.push({ prompt, outcome });
      }
    }),
  );
  const served = async (n: number) => {
    const until = outcomes.length + n;
    await waitFor(() => outcomes.length >= until, `${n} more requests served`, 30_000);
  };

  await served(6);
  const busyAtSignal: number[] = [];
  for (const worker of cluster.workers) {
    const pid = cluster.supervisor.pid(worker.name);
    assert.ok(pid !== undefined);
    busyAtSignal.push(inFlight);
    cluster.supervisor.kill(worker.name, 'SIGTERM');
    await waitFor(() => {
      const now = cluster.supervisor.pid(worker.name);
      return now !== undefined && now !== pid;
    }, `${worker.name} replaced`);
    await waitForAsync(
      async () => cluster.dispatcher.workers().every((w) => w.up),
      'the gateway to route to every worker again',
      30_000,
    );
    await served(6); // the successor under load before the next one goes
  }
  running = false;
  await Promise.all(load);

  assert.deepEqual(
    cluster.supervisor
      .status()
      .map((s) => `${s.name}:${s.restarts}`)
      .sort(),
    cluster.workers.map((w) => `${w.name}:1`).sort(),
    'each worker was replaced once',
  );
  assert.ok(
    busyAtSignal.every((n) => n > 0),
    `requests were in flight at every SIGTERM: ${busyAtSignal.join(', ')}`,
  );
  for (const { prompt, outcome } of outcomes) {
    assert.equal(outcome.status, 200, outcome.text);
    assert.deepEqual(outcome, solo[prompt], 'the answer it gets alone (I7)');
  }
  assert.ok(outcomes.length >= 30, `${outcomes.length} requests`);
  await assertClusterPoolsWhole(cluster);
});

test('the gateway drains: a stream in flight ends with [DONE]; new connections are refused', async () => {
  const stream = fetch(`${cluster.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor('t1')}` },
    body: JSON.stringify({ model: MODEL_ID, prompt: PROMPTS[2], max_tokens: 60, temperature: 0, stream: true }),
    signal: AbortSignal.timeout(30_000),
  });
  const response = await stream;
  assert.equal(response.status, 200);
  const reader = response.body!.getReader();
  const first = await reader.read(); // the stream has begun
  assert.equal(first.done, false);
  const drained = cluster.drain(20_000);
  closed = true;
  assert.equal(cluster.gateway.state.shuttingDown, true, '/health/ready answers 503 from now on');
  let text = Buffer.from(first.value!).toString('utf8');
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString('utf8');
  }
  assert.match(text, /data: \[DONE\]\n\n$/, 'the stream ran to its end');
  assert.doesNotMatch(text, /event: error/);
  await drained;
  await assert.rejects(fetch(`${cluster.url}/health/live`, { signal: AbortSignal.timeout(5_000) }));
});
