// A worker announces its first forward pass, which nothing foretells, as an hour of silence (cluster/long-pass.ts).
// One that freezes right after that pass, before its next message, must still be found within the silence bound: the
// pass's end is said at once, so the hour no longer stands.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post } from '../serving/serve-helpers.js';
import { startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 1_000;
let cluster: RunningCluster;
let frozen: string | undefined;

before(async () => {
  cluster = await startHeartbeatCluster(SILENCE_MS, { freezeAfterFirstPromptPass: true });
});
after(async () => {
  if (frozen !== undefined) cluster?.supervisor.kill(frozen, 'SIGCONT');
  await cluster?.close();
});

test('a prefill worker frozen right after its first pass (announced as an hour) is taken as gone within the bound', async () => {
  frozen = cluster.workers.find((w) => w.role === 'prefill')!.name;
  const started = performance.now();
  const r = await post(
    cluster,
    '/v1/completions',
    { model: MODEL_ID, prompt: tokens(20, 1), max_tokens: 3, temperature: 0 },
    'a',
  );
  const ms = performance.now() - started;
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.equal((r.json as { error: { code: string } }).error.code, 'worker_unavailable', JSON.stringify(r.json));
  // the bound and a heartbeat period, with slack for a loaded machine (the transfer's own timeout is 10 s)
  assert.ok(ms < SILENCE_MS * 4, `failed after ${ms.toFixed(0)} ms`);
  const link = cluster.dispatcher.workers().find((w) => w.name === frozen);
  assert.equal(link?.up, false, 'the frozen worker is down');
});
