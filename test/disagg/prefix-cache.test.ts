// The tenant-scoped prefix cache in disaggregated mode (I9, I7): two prefill workers each keep their tenants' caches,
// answers are bit-identical to a colocated server without a cache, reuse stays within a tenant, the transfer still
// carries every prompt page (decode pools hold nothing once idle), and /metrics counts the prefill workers' cached
// and reused pages.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { type Answer, complete, tokens } from '../serving/isolation-suite.js';
import {
  adminMetrics,
  startTestServer,
  waitForAsync,
  writeAdminTokenFile,
  writeKeyFile,
} from '../serving/serve-helpers.js';
import { poolStats, startTestCluster } from './cluster-helpers.js';

const TENANTS = ['t0', 't1', 't2'];
const CACHE_PAGES = 6;
let cluster: RunningCluster;
let plain: RunningServer;
before(async () => {
  const keys = writeKeyFile(TENANTS);
  const serve = { apiKeysPath: keys, prefillChunk: 24, stepTokens: 96, adminTokenFile: writeAdminTokenFile() };
  [cluster, plain] = await Promise.all([
    startTestCluster({ serve: { ...serve, prefixCachePages: CACHE_PAGES }, prefill: 2, decode: 1 }),
    startTestServer(serve),
  ]);
});
after(async () => {
  await Promise.all([cluster?.close(), plain?.close()]);
});

const HEAD = tokens(48, 1); // three whole pages every prompt below starts with
const prompts = [0, 1, 2, 3, 4].map((i) => [...HEAD, ...tokens(5 + i * 9, 10 + i)]);

async function reused(): Promise<number> {
  return (await poolStats(cluster)).reduce((sum, s) => sum + (s.pagesReused ?? 0), 0);
}

async function metric(name: string): Promise<number> {
  const text = await adminMetrics(cluster);
  const line = new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, 'm').exec(text);
  assert.ok(line !== null, `${name} in /metrics`);
  return Number(line[1]);
}

test('disaggregated prefix cache: bit-identical answers, reuse only within a tenant, counted in /metrics', async () => {
  const expected: Answer[] = [];
  for (const p of prompts) expected.push(await complete(plain, 't0', p, 12));

  assert.deepEqual(await complete(cluster, 't0', prompts[0]!, 12), expected[0]);
  assert.equal(await reused(), 0);
  assert.deepEqual(await complete(cluster, 't1', prompts[0]!, 12), expected[0]);
  assert.equal(await reused(), 0, 't1 does not read t0’s pages for the same tokens');
  assert.deepEqual(await complete(cluster, 't0', prompts[1]!, 12), expected[1]);
  assert.equal(await reused(), 3, 't0’s second prompt reads the shared head on the prefill worker that holds it');

  // all at once, three tenants, twice over: the budgets evict while others read
  const mixed = prompts.flatMap((p, i) => TENANTS.map((tenant) => ({ tenant, p, i })));
  const answers = await Promise.all([...mixed, ...mixed].map((m) => complete(cluster, m.tenant, m.p, 12)));
  answers.forEach((a, k) => {
    const m = mixed[k % mixed.length]!;
    assert.deepEqual(a, expected[m.i], `prompt ${m.i} of ${m.tenant}`);
  });
  assert.ok((await reused()) > 3);

  // idle: decode pools whole (every prompt page came by transfer and was freed); prefill pools hold only cached pages
  await waitForAsync(
    async () =>
      (await poolStats(cluster)).every(
        (s) => s.running === 0 && s.waiting === 0 && s.pagesFree + (s.pagesCached ?? 0) === s.pagesTotal,
      ),
    'the cluster to be idle (frees on the far side are asynchronous)',
  );
  const stats = await poolStats(cluster);
  const prefills = stats.slice(0, 2);
  const decode = stats[2]!;
  assert.equal(decode.pagesFree, decode.pagesTotal, 'decode holds nothing once idle');
  assert.equal(decode.pagesCached, undefined, 'decode keeps no cache: it never learns where pages came from');
  let cachedTotal = 0;
  for (const s of prefills) {
    const cached = s.pagesCached ?? 0;
    assert.ok(cached <= CACHE_PAGES * TENANTS.length);
    assert.equal(s.pagesFree + cached, s.pagesTotal, 'a prefill pool holds only its cache once idle');
    cachedTotal += cached;
  }
  assert.ok(cachedTotal > 0);
  await cluster.dispatcher.refresh();
  assert.equal(await metric('kvfence_kv_pages_cached'), cachedTotal, 'the prefill workers’ cached pages');
  assert.equal(await metric('kvfence_kv_pages_reused'), await reused());
  const open = await (await fetch(`${cluster.url}/metrics`)).text();
  assert.match(open, /^kvfence_kv_pages_cached/m);
  assert.doesNotMatch(open, /kvfence_kv_pages_reused/, 'hits as they happen are the operator’s to read, not anyone’s');
});
