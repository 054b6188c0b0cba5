// Tenant limits hold the same in every deployment (DESIGN I11): colocated, and disaggregated with one and with two decode
// workers. The same key file gives the same statuses (per-tenant concurrentRequestsMax → 429 cluster-wide, per-tenant
// kvPagesMax → the tenant's requests wait for each other), and a tenant flooding past both limits does not slow another
// tenant's short request by more than a small bound over the same request beside a well-behaved tenant. A reloaded key
// file's limits apply to new requests.
import assert from 'node:assert/strict';
import { copyFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { tokens } from '../serving/isolation-suite.js';
import { type Served, startTestServer, writeKeyFile } from '../serving/serve-helpers.js';
import { probeLatency, tenantLoad, timedStream } from '../serving/tenant-load.js';
import { assertClusterPoolsWhole, startTestCluster } from './cluster-helpers.js';

/** 15 pages a request (150 + 90 tokens, pages of 16): a quota of 32 runs two at once. */
const LOAD_PROMPT = tokens(150, 3);
const LOAD_TOKENS = 90;
const PROBE_PROMPT = tokens(8, 5);
const PROBE_TOKENS = 8;
const PROBES = 7;
/** Flood median ≤ BOUND_FACTOR × benign median + BOUND_SLACK_MS: generous, so CI's noise cannot fail it. */
const BOUND_FACTOR = 3;
const BOUND_SLACK_MS = 250;

const TENANTS = ['solo', 'small', 'free', 'calm', 'flood', 'probe'];
const LIMITS = {
  solo: { concurrentRequestsMax: 1 },
  small: { concurrentRequestsMax: 2, kvPagesMax: 16 },
  calm: { concurrentRequestsMax: 4, kvPagesMax: 32 },
  flood: { concurrentRequestsMax: 4, kvPagesMax: 32 },
};

interface Deployment extends Served {
  keyFile: string;
  reloadKeys(): string;
  close(): Promise<void>;
  whole(): Promise<void>;
}

const deployments: [string, () => Promise<Deployment>][] = [
  [
    'colocated',
    async () => {
      const keyFile = writeKeyFile(TENANTS, LIMITS);
      const s = await startTestServer({ apiKeysPath: keyFile });
      return { url: s.url, keyFile, reloadKeys: () => s.reloadKeys(), close: () => s.close(), whole: async () => {} };
    },
  ],
  ...[1, 2].map((decode): [string, () => Promise<Deployment>] => [
    `disaggregated, ${decode} decode worker${decode > 1 ? 's' : ''}`,
    async () => {
      const keyFile = writeKeyFile(TENANTS, LIMITS);
      const c = await startTestCluster({ serve: { apiKeysPath: keyFile }, prefill: 1, decode });
      return {
        url: c.url,
        keyFile,
        reloadKeys: () => c.reloadKeys(),
        close: () => c.close(),
        whole: () => assertClusterPoolsWhole(c),
      };
    },
  ]),
];

for (const [label, start] of deployments) {
  describe(`tenant limits, ${label}`, () => {
    let server: Deployment;
    before(async () => {
      server = await start();
    });
    after(async () => {
      await server?.close();
    });

    const t0 = performance.now();
    const burst = (tenant: string, n: number) =>
      Promise.all(Array.from({ length: n }, () => timedStream(server, tenant, tokens(56, 9), 200, t0)));
    const statuses = (runs: { status: number }[]) => runs.map((r) => r.status).sort();

    test('the key file’s limits: the same statuses in every deployment', async () => {
      const [solo, small, free] = await Promise.all([burst('solo', 3), burst('small', 3), burst('free', 3)]);
      assert.deepEqual(statuses(solo), [200, 429, 429], 'concurrentRequestsMax 1, cluster-wide');
      assert.deepEqual(
        statuses(small),
        [200, 200, 429],
        'concurrentRequestsMax 2 (a request waiting for pages counts)',
      );
      assert.deepEqual(statuses(free), [200, 200, 200], 'the defaults');
      // 56 + 200 tokens is 16 pages, the whole of small's quota: its two requests ran one after the other
      const [a, b] = small.filter((r) => r.status === 200).sort((x, y) => x.endAt - y.endAt);
      assert.ok(a !== undefined && b !== undefined && a.firstTokenAt !== undefined && b.firstTokenAt !== undefined);
      assert.ok(
        b.firstTokenAt > a.firstTokenAt + (a.endAt - a.firstTokenAt) / 2,
        `small's second request waited for the first's pages (${JSON.stringify(small)})`,
      );
      for (const r of [...solo, ...small, ...free].filter((r) => r.status === 200)) assert.equal(r.tokens, 200);
      await server.whole();
    });

    test('a tenant flooding past its quota and concurrency does not slow another tenant', async (t) => {
      const idle = await probeLatency(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, PROBES);
      // benign: two streams at a time, within calm's quota
      const calm = tenantLoad(server, 'calm', 2, LOAD_PROMPT, LOAD_TOKENS, 10);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const benign = await probeLatency(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, PROBES);
      const calmReport = await calm.stop();
      // flood: twelve clients against a limit of four requests in flight and pages for two
      const flood = tenantLoad(server, 'flood', 12, LOAD_PROMPT, LOAD_TOKENS, 10);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const flooded = await probeLatency(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, PROBES);
      const floodReport = await flood.stop();
      t.diagnostic(
        `${label}: probe median idle ${idle.toFixed(0)} ms, beside calm ${benign.toFixed(0)} ms, ` +
          `beside flood ${flooded.toFixed(0)} ms (${(flooded / benign).toFixed(2)}x); ` +
          `flood statuses ${JSON.stringify([...floodReport.statuses])}`,
      );
      assert.deepEqual([...calmReport.statuses.keys()], [200], 'the well-behaved tenant is never refused');
      assert.ok((floodReport.statuses.get(429) ?? 0) > 0, 'the flood met its concurrency limit');
      assert.ok((floodReport.statuses.get(200) ?? 0) > 0, 'the flood was served within its limits');
      assert.deepEqual(
        [...floodReport.statuses.keys()].filter((s) => s !== 200 && s !== 429),
        [],
        'the flood got only answers and 429s',
      );
      assert.ok(
        flooded <= BOUND_FACTOR * benign + BOUND_SLACK_MS,
        `beside the flood ${flooded.toFixed(0)} ms, beside a well-behaved tenant ${benign.toFixed(0)} ms`,
      );
      await server.whole();
    });

    test('a reloaded key file’s limits apply to new requests', async () => {
      copyFileSync(writeKeyFile(TENANTS, { ...LIMITS, solo: { concurrentRequestsMax: 3 } }), server.keyFile);
      assert.match(server.reloadKeys(), /6 tenants reloaded/);
      assert.deepEqual(statuses(await burst('solo', 3)), [200, 200, 200]);
      await server.whole();
    });
  });
}
