// Every transfer fault, end to end across real processes: the prefill worker faults the KV transfers of chosen
// tenants (the fault-test worker program, test/helpers/faulty-worker-entry.ts), while other tenants run at the same time. A faulted
// request fails with an error (500 kv_transfer_failed), never a 200 with content; no page leaks on either side; the
// other tenants' answers are bit-identical to their solo runs.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import type { FaultPlans } from '../helpers/fault-transport.js';
import { type Answer, complete, tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post, writeKeyFile } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, startTestCluster } from './cluster-helpers.js';

/** A 40-token prompt is 3 pages of 16: frame 0 = HELLO, 1..3 = PAGE (8 KiB each), 4 = COMMIT. */
const FAULTS: FaultPlans = {
  'f-drop': { frames: [{ kind: 'drop', frame: 1 }] },
  'f-corrupt': { frames: [{ kind: 'corrupt', frame: 2, byteIndex: 4000 }] },
  'f-truncate': { frames: [{ kind: 'truncate', frame: 2, keepBytes: 60 }] },
  'f-nonce': { frames: [{ kind: 'wrong_nonce', frame: 1 }] },
  'f-replay': { frames: [{ kind: 'replay', frame: 1 }] },
  'f-first': { frames: [{ kind: 'bad_first_token', frame: 4 }] },
  'f-cut': { bytes: { cutAfterBytes: 5000 } },
  'f-wire': { bytes: { corruptByteAt: 12_000 } },
};
const CLEAN = ['ok-a', 'ok-b', 'ok-c'];

let cluster: RunningCluster;
before(async () => {
  cluster = await startTestCluster({
    serve: { apiKeysPath: writeKeyFile([...CLEAN, ...Object.keys(FAULTS)]) },
    plan: { faults: FAULTS },
  });
});
after(async () => {
  await cluster?.close();
});

async function faulted(
  tenant: string,
  stream: boolean,
): Promise<{ status: number; code: string | undefined; body: string }> {
  const r = await fetch(`${cluster.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer test-key-for-${tenant}-0123456789` },
    body: JSON.stringify({ model: MODEL_ID, prompt: tokens(40, 3), max_tokens: 12, temperature: 0, stream }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = await r.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(body) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  return { status: r.status, code, body };
}

describe('transfer faults end to end (1 prefill + 1 decode child process)', () => {
  test('each fault fails its request with 500 kv_transfer_failed while other tenants get their solo answers', async () => {
    const shapes = CLEAN.map((tenant, i) => ({ tenant, prompt: tokens(20 + i * 30, i), maxTokens: 20 + i * 7 }));
    const solo: Answer[] = [];
    for (const s of shapes) solo.push(await complete(cluster, s.tenant, s.prompt, s.maxTokens));
    const clean = Promise.all([...shapes, ...shapes].map((s) => complete(cluster, s.tenant, s.prompt, s.maxTokens)));
    const outcomes = await Promise.all(
      Object.keys(FAULTS).flatMap((tenant) =>
        [faulted(tenant, false), faulted(tenant, true)].map(async (p) => ({ tenant, ...(await p) })),
      ),
    );
    for (const o of outcomes) {
      assert.equal(o.status, 500, `${o.tenant}: ${o.body}`);
      assert.equal(o.code, 'kv_transfer_failed', `${o.tenant}: ${o.body}`);
      assert.ok(!o.body.includes('[DONE]') && !o.body.includes('finish_reason'), `${o.tenant}: no success shape`);
    }
    for (const [i, answer] of (await clean).entries()) assert.deepEqual(answer, solo[i % shapes.length]);
    await assertClusterPoolsWhole(cluster);
  });

  test('the same faults again, one at a time: each fails closed with its own reason, naming no other request', async () => {
    const reasons: Record<string, RegExp> = {
      'f-drop': /page_out_of_order/,
      'f-corrupt': /checksum_mismatch/,
      'f-truncate': /frame_truncated|malformed_frame/,
      'f-nonce': /wrong_nonce/,
      'f-replay': /wrong_request|wrong_nonce|wrong_tenant/,
      'f-first': /commit_mismatch/,
      'f-cut': /connection_closed|frame_truncated/,
      'f-wire': /connection_closed|mac_invalid/,
    };
    for (const tenant of Object.keys(FAULTS)) {
      const o = await faulted(tenant, false);
      assert.equal(o.status, 500, `${tenant}: ${o.body}`);
      assert.match(o.body, /KV transfer failed \([a-z_]+\); the request's pages were scrubbed/, tenant);
      assert.ok(!o.body.includes('cmpl-'), `${tenant}: the error names no other request`);
      assert.match(o.body, reasons[tenant]!, tenant);
    }
    const r = await post(cluster, '/v1/completions', { model: MODEL_ID, prompt: tokens(40, 3), max_tokens: 3 }, 'ok-a');
    assert.equal(r.status, 200, 'a clean tenant with the same prompt is served');
    await assertClusterPoolsWhole(cluster);
  });
});
