// The tenant-scoped prefix cache over HTTP (I9, I7): answers identical to a server without one, reuse only within a
// tenant, cached pages reported in /metrics (test/disagg/prefix-cache.test.ts does the same for a cluster).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { type Answer, complete, tokens } from './isolation-suite.js';
import { startTestServer, writeKeyFile } from './serve-helpers.js';

const TENANTS = ['t0', 't1', 't2'];
let cached: RunningServer;
let plain: RunningServer;
before(async () => {
  const keys = writeKeyFile(TENANTS);
  cached = await startTestServer({ apiKeysPath: keys, prefixCachePages: 6, prefillChunk: 24, stepTokens: 96 });
  plain = await startTestServer({ apiKeysPath: keys, prefillChunk: 24, stepTokens: 96 });
});
after(async () => {
  await cached?.close();
  await plain?.close();
});

const HEAD = tokens(48, 1); // three whole pages every prompt below starts with
const prompts = [0, 1, 2, 3, 4].map((i) => [...HEAD, ...tokens(5 + i * 9, 10 + i)]);

test('every answer equals the server without a cache, alone and mixed; reuse stays within a tenant', async () => {
  const cache = cached.worker.prefixCache!;
  const expected: Answer[] = [];
  for (const p of prompts) expected.push(await complete(plain, 't0', p, 12));

  assert.deepEqual(await complete(cached, 't0', prompts[0]!, 12), expected[0]);
  assert.equal(cache.reusedPages, 0);
  assert.deepEqual(await complete(cached, 't1', prompts[0]!, 12), expected[0]);
  assert.equal(cache.reusedPages, 0, 't1 does not read t0’s pages for the same tokens');
  assert.deepEqual(await complete(cached, 't0', prompts[1]!, 12), expected[1]);
  assert.equal(cache.reusedPages, 3, 't0’s second prompt reads the shared head');

  // all at once, three tenants, twice over: the 6-page budgets evict while others read
  const mixed = prompts.flatMap((p, i) => TENANTS.map((tenant) => ({ tenant, p, i })));
  const answers = await Promise.all([...mixed, ...mixed].map((m) => complete(cached, m.tenant, m.p, 12)));
  answers.forEach((a, k) => {
    const m = mixed[k % mixed.length]!;
    assert.deepEqual(a, expected[m.i], `prompt ${m.i} of ${m.tenant}`);
  });
  assert.ok(cache.evictedPages > 0, 'the budgets evicted');
  assert.ok(cache.reusedPages > 3);
  for (const tenant of TENANTS) assert.ok(cache.pagesOf(tenant) <= 6);
  assert.equal(cached.incidents.list().length, 0);

  const metrics = await (await fetch(`${cached.url}/metrics`)).text();
  const gauge = /^kvfence_kv_pages_cached\{[^}]*\} (\d+)$/m.exec(metrics);
  assert.ok(gauge !== null && Number(gauge[1]) === cache.pageCount && cache.pageCount > 0, 'cached pages in /metrics');
  const { free, active } = cached.worker.pool.checkConservation();
  assert.equal(active, cache.pageCount, 'idle: only cached pages are held');
  assert.equal(free + active, cached.worker.pool.pageCount);
});
