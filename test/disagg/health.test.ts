// /health, /health/live and /health/ready of a disaggregated gateway while its only decode worker is down: degraded
// (503, naming the role) and not ready, live throughout, and back to 200 once the supervisor has restarted it.
// /health lists the workers by name and role, never by address (DESIGN I12).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { startTestCluster } from './cluster-helpers.js';

let cluster: RunningCluster;
before(async () => {
  cluster = await startTestCluster({ prefill: 1, decode: 1 });
});
after(async () => {
  await cluster?.close();
});

async function get(path: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${cluster.url}${path}`, { signal: AbortSignal.timeout(10_000) });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

/** Polls `path` until it answers `status` (every 10 ms, at most `timeoutMs`); returns that answer. */
async function until(path: string, status: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await get(path);
    if (r.status === status) return r;
    if (Date.now() > deadline) throw new Error(`${path} still ${r.status} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test('decode down: /health 503 degraded naming decode, /health/ready 503, /health/live 200; all 200 after the restart', async () => {
  const ok = await get('/health');
  assert.equal(ok.status, 200);
  assert.equal(ok.json['status'], 'ok');
  const workers = ok.json['workers'] as Record<string, unknown>[];
  assert.deepEqual(
    workers.map((w) => [w['name'], w['role'], w['up']]),
    [
      ['prefill-0', 'prefill', true],
      ['decode-0', 'decode', true],
    ],
  );
  assert.ok(workers.every((w) => !('address' in w)) && !JSON.stringify(ok.json).includes('127.0.0.1'), 'no address');
  assert.deepEqual((await get('/health/ready')).json, { status: 'ready' });

  cluster.supervisor.kill('decode-0', 'SIGKILL');
  const notReady = await until('/health/ready', 503, 10_000);
  assert.deepEqual(notReady.json, { status: 'not_ready', down: ['decode'] });
  const degraded = await get('/health');
  assert.equal(degraded.status, 503);
  assert.equal(degraded.json['status'], 'degraded');
  assert.deepEqual(degraded.json['down'], ['decode']);
  assert.equal(typeof degraded.json['kvPagesTotal'], 'number', "/health's figures stay");
  const live = await get('/health/live');
  assert.equal(live.status, 200);

  await until('/health/ready', 200, 30_000);
  const back = await get('/health');
  assert.equal(back.status, 200);
  assert.equal(back.json['status'], 'ok');
  assert.equal(back.json['down'], undefined);
});
