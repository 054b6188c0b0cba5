// Crashes across real processes (2 prefill + 2 decode children): a prefill killed mid-transfer, a decode killed while
// it holds a reservation. The affected request gets an error within its deadline, the surviving side's pages are all
// freed, a request on the other pair runs on with its solo answer, and the killed worker is restarted and used again.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { PoolStats } from '../../src/cluster/control-protocol.js';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { complete, tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post, waitForAsync, writeKeyFile } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, startTestCluster } from './cluster-helpers.js';

let cluster: RunningCluster;
before(async () => {
  cluster = await startTestCluster({
    prefill: 2,
    decode: 2,
    serve: { apiKeysPath: writeKeyFile(['stall', 'other']) },
    // the stall tenant's transfers stop after HELLO and the first page: a transfer caught in the middle
    plan: { faults: { stall: { frames: [{ kind: 'stall', frame: 2 }] } } },
  });
});
after(async () => {
  await cluster?.close();
});

/** Index (in cluster.workers) of the worker of `role` that holds pages now, once one does. */
async function holder(role: 'prefill' | 'decode'): Promise<number> {
  let found = -1;
  await waitForAsync(async () => {
    const stats = await cluster.dispatcher.poolStats();
    found = stats.findIndex(
      (s: PoolStats | undefined, i) =>
        cluster.workers[i]!.role === role && s !== undefined && s.pagesFree < s.pagesTotal,
    );
    return found >= 0;
  }, `a ${role} worker holding the stalled transfer's pages`);
  return found;
}

async function allUp(): Promise<void> {
  await waitForAsync(
    async () => cluster.dispatcher.workers().every((w) => w.up),
    'every worker to be up again',
    30_000,
  );
}

async function stalledRequest(): Promise<{ status: number; code: string; ms: number }> {
  const started = performance.now();
  const r = await post(
    cluster,
    '/v1/completions',
    { model: MODEL_ID, prompt: tokens(40, 1), max_tokens: 10, temperature: 0 },
    'stall',
  );
  return {
    status: r.status,
    code: (r.json as { error: { code: string } }).error.code,
    ms: performance.now() - started,
  };
}

describe('worker crashes', () => {
  test('prefill killed mid-transfer: 503 worker_unavailable at once, decode frees its pages, the other pair carries on', async () => {
    const otherPrompt = tokens(50, 2);
    const solo = await complete(cluster, 'other', otherPrompt, 30);
    const victim = stalledRequest();
    const index = await holder('prefill');
    const other = complete(cluster, 'other', otherPrompt, 30); // lands on the idle pair
    cluster.supervisor.kill(cluster.workers[index]!.name, 'SIGKILL');
    const v = await victim;
    assert.equal(v.status, 503);
    assert.equal(v.code, 'worker_unavailable');
    assert.ok(v.ms < 5_000, `the error came within ${v.ms.toFixed(0)} ms, before any transfer deadline`);
    assert.deepEqual(await other, solo);
    await allUp();
    await assertClusterPoolsWhole(cluster, 30_000);
    assert.deepEqual(await complete(cluster, 'other', otherPrompt, 30), solo, 'served again after the restart');
  });

  test('decode killed while it holds a reservation: 503, the prefill frees its pages, the other pair carries on', async () => {
    const otherPrompt = tokens(70, 4);
    const solo = await complete(cluster, 'other', otherPrompt, 20);
    const victim = stalledRequest();
    const index = await holder('decode');
    const other = complete(cluster, 'other', otherPrompt, 20);
    cluster.supervisor.kill(cluster.workers[index]!.name, 'SIGKILL');
    const v = await victim;
    assert.equal(v.status, 503);
    assert.equal(v.code, 'worker_unavailable');
    assert.ok(v.ms < 5_000, `the error came within ${v.ms.toFixed(0)} ms`);
    assert.deepEqual(await other, solo);
    // the surviving prefill side: its sender saw the connection die and released (scrubbed) the pages
    await waitForAsync(async () => {
      const stats = await cluster.dispatcher.poolStats();
      return stats.every(
        (s, i) => cluster.workers[i]!.role !== 'prefill' || (s !== undefined && s.pagesFree === s.pagesTotal),
      );
    }, 'the prefill pools to be whole');
    await allUp();
    await assertClusterPoolsWhole(cluster, 30_000);
  });

  test('decode killed mid-stream: the stream ends with an SSE error event, never [DONE] or a finish_reason', async () => {
    await allUp();
    const response = await fetch(`${cluster.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer test-key-for-other-0123456789' },
      body: JSON.stringify({ model: MODEL_ID, prompt: tokens(5, 12), max_tokens: 250, temperature: 0, stream: true }),
      signal: AbortSignal.timeout(30_000),
    });
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    let text = '';
    const first = await reader.read();
    text += new TextDecoder().decode(first.value);
    cluster.supervisor.kill(cluster.workers[await holder('decode')]!.name, 'SIGKILL');
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    assert.ok(events.length >= 2 && events.length < 250, `the stream was cut mid-way (${events.length} events)`);
    assert.ok(!events.includes('[DONE]'), 'no [DONE]');
    const last = JSON.parse(events.at(-1)!) as { error?: { code: string } };
    assert.equal(last.error?.code, 'worker_unavailable');
    for (const e of events.slice(0, -1)) {
      const chunk = JSON.parse(e) as { choices: { finish_reason: string | null }[] };
      assert.equal(chunk.choices[0]!.finish_reason, null, 'no finish_reason on any chunk');
    }
    await allUp();
    await assertClusterPoolsWhole(cluster, 30_000);
  });

  test('a stalled transfer with every worker alive ends at the decode idle timeout with 500, pages freed on both sides', async () => {
    const v = await stalledRequest();
    assert.equal(v.status, 500);
    assert.equal(v.code, 'kv_transfer_failed');
    assert.ok(v.ms < 9_000, `within the idle timeout (3 s) plus slack: ${v.ms.toFixed(0)} ms`);
    await assertClusterPoolsWhole(cluster);
  });
});
