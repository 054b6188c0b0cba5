// Pre-authentication floods against a real cluster (DESIGN I11; issue 12 item 5): 2000 bare TCP connections to the
// decode worker's KV transfer port and 2000 to its control port while requests run. Every request still gets its
// 200 with the same answer as alone (each one's KV transfer opens a new connection to the flooded port), and the
// workers close every flood connection within the pre-authentication deadline.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { LIMITS } from '../../src/util/limits.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID } from '../serving/serve-helpers.js';
import { bareFlood } from '../transfer/bare-flood.js';
import { assertClusterPoolsWhole, startTestCluster } from './cluster-helpers.js';

const FLOOD = 2_000;

let cluster: RunningCluster;
before(async () => {
  cluster = await startTestCluster();
});
after(async () => {
  await cluster?.close();
});

async function completion(seed: number): Promise<{ status: number; body: string }> {
  const r = await fetch(`${cluster.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, prompt: tokens(30 + seed * 7, seed), max_tokens: 8, temperature: 0 }),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: r.status, body: await r.text() };
}

test('bare connection floods on the transfer and control ports: every request succeeds, every flood socket is cut', async () => {
  const decode = cluster.workers.find((w) => w.role === 'decode');
  assert.ok(decode?.transfer !== undefined, 'the decode worker listens for KV transfers');
  const seeds = [0, 1, 2, 3, 4, 5, 6, 7];
  const solo: string[] = [];
  for (const seed of seeds) {
    const r = await completion(seed);
    assert.equal(r.status, 200, r.body);
    solo.push(JSON.parse(r.body).choices[0].text);
  }
  const floods = Promise.all([bareFlood(decode.transfer, FLOOD), bareFlood(decode.control, FLOOD)]);
  // twice over: while the flood connects, and once it is all connected
  const during = await Promise.all(seeds.map((seed) => completion(seed)));
  const [transferFlood, controlFlood] = await floods;
  const afterwards = await Promise.all(seeds.map((seed) => completion(seed)));
  for (const [i, r] of [...during, ...afterwards].entries()) {
    assert.equal(r.status, 200, `request ${i}: ${r.body}`);
    assert.equal(JSON.parse(r.body).choices[0].text, solo[i % seeds.length], `request ${i}: the same answer as alone`);
  }
  await Promise.all([transferFlood.allClosed, controlFlood.allClosed]);
  for (const [port, flood] of [
    ['transfer', transferFlood],
    ['control', controlFlood],
  ] as const) {
    assert.equal(flood.livedMs.length, FLOOD, `${port}: the worker closed every flood connection`);
    const longest = Math.max(...flood.livedMs);
    // the deadline plus scheduling slack on a loaded 2-core machine (the old handshake timeout was 5 s)
    assert.ok(longest < LIMITS.preAuthTimeoutMsMax + 1_500, `${port}: one lived ${longest.toFixed(0)} ms`);
  }
  await assertClusterPoolsWhole(cluster);
});
