// A worker's health port answers the orchestrator's probes, and strangers who connect and send nothing cannot crowd
// them out: a new connection evicts the one that has waited longest without a request, and a silent one is cut off
// within a second.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { HEALTH_IDLE_MS, serveWorkerHealth, type WorkerPhase } from './worker-health.js';

test('live; not ready while starting, ready, then not ready while draining; other paths and methods refused', async () => {
  let phase: WorkerPhase = 'starting';
  const health = await serveWorkerHealth('127.0.0.1:0', () => phase);
  try {
    const url = `http://${health.address}`;
    assert.equal((await fetch(`${url}/health/live`)).status, 200);
    const ready = await fetch(`${url}/health/ready`);
    assert.deepEqual([ready.status, await ready.json()], [503, { status: 'not_ready', starting: true }]);
    phase = 'ready';
    assert.equal((await fetch(`${url}/health/ready`)).status, 200);
    phase = 'draining';
    const draining = await fetch(`${url}/health/ready`);
    assert.deepEqual([draining.status, await draining.json()], [503, { status: 'not_ready', draining: true }]);
    assert.equal((await fetch(`${url}/health/live`)).status, 200);
    assert.equal((await fetch(`${url}/metrics`)).status, 404);
    assert.equal((await fetch(`${url}/health/live`, { method: 'POST' })).status, 405);
  } finally {
    await health.close();
  }
});

test('strangers holding silent connections neither block a probe nor keep their connections', async () => {
  const health = await serveWorkerHealth('127.0.0.1:0', () => 'ready');
  const port = Number(health.address.split(':').pop());
  const strangers: Socket[] = [];
  try {
    const closedAt: number[] = [];
    const start = performance.now();
    for (let i = 0; i < 300; i++) {
      const s = connect({ host: '127.0.0.1', port });
      s.on('error', () => {});
      s.once('close', () => closedAt.push(performance.now() - start));
      strangers.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    // the probe comes from the same address as all of them, as a kubelet's would share a node with a stranger
    const probe = await fetch(`http://${health.address}/health/live`, { signal: AbortSignal.timeout(HEALTH_IDLE_MS) });
    assert.equal(probe.status, 200);
    await new Promise((r) => setTimeout(r, HEALTH_IDLE_MS + 500));
    assert.equal(closedAt.length, strangers.length, 'every silent connection was closed');
    assert.ok(Math.max(...closedAt) < HEALTH_IDLE_MS + 500, `the last closed after ${Math.max(...closedAt)} ms`);
  } finally {
    for (const s of strangers) s.destroy();
    await health.close();
  }
});
