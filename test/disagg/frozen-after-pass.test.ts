// A worker frozen in or right after a forward pass must be found within the silence bound. A pass is announced to the
// gateway when it may outlast that bound (cluster/long-pass.ts); the first is foreseen from a pass the worker timed
// before it served (else it would be announced as an hour, and a worker frozen in it found an hour later), and the end
// of an announced pass is said at once (else a worker frozen right after it stays busy for the time announced).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import type { TestWorkerPlan } from '../helpers/test-worker-entry.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post } from '../serving/serve-helpers.js';
import { startHeartbeatCluster } from './cluster-helpers.js';

const SILENCE_MS = 1_000;

const plans: [string, TestWorkerPlan][] = [
  ['right after its first pass', { freezeAfterFirstPromptPass: true }],
  ['inside its first pass', { freezeInFirstPromptPass: true }],
];

for (const [when, plan] of plans) {
  describe(`a prefill worker frozen ${when}`, () => {
    let cluster: RunningCluster;
    let frozen: string | undefined;
    before(async () => {
      cluster = await startHeartbeatCluster(SILENCE_MS, plan);
    });
    after(async () => {
      if (frozen !== undefined) cluster?.supervisor.kill(frozen, 'SIGCONT');
      await cluster?.close();
    });

    test('is taken as gone within the bound, and its request fails with 503', async () => {
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
  });
}
