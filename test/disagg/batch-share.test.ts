// A tenant whose requests fill the whole running batch does not keep another tenant's request waiting for one of them
// to end (DESIGN I11), colocated and disaggregated: one of the first tenant's sequences pauses (its pages held) while the
// other's request runs, then resumes where it stopped, every token of every answer delivered.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { tokens } from '../serving/isolation-suite.js';
import { type Served, startTestServer, writeKeyFile } from '../serving/serve-helpers.js';
import { type TimedStream, timedStream } from '../serving/tenant-load.js';
import { assertClusterPoolsWhole, startTestCluster } from './cluster-helpers.js';

const BATCH = 4;
/** 16 + 230 tokens: the context (256) less a page, so each answer runs for hundreds of steps */
const FILL_PROMPT = tokens(16, 3);
const FILL_TOKENS = 230;
const PROBE_PROMPT = tokens(8, 5);
const PROBE_TOKENS = 8;

const deployments: [string, () => Promise<Served & { close(): Promise<void>; whole(): Promise<void> }>][] = [
  [
    'colocated',
    async () => {
      const s = await startTestServer({ apiKeysPath: writeKeyFile(['fill', 'probe']), runningMax: BATCH });
      return { url: s.url, close: () => s.close(), whole: async () => {} };
    },
  ],
  [
    'disaggregated',
    async () => {
      const serve = { apiKeysPath: writeKeyFile(['fill', 'probe']), runningMax: BATCH };
      const c = await startTestCluster({ serve });
      return { url: c.url, close: () => c.close(), whole: () => assertClusterPoolsWhole(c) };
    },
  ],
];

for (const [label, start] of deployments) {
  describe(`a tenant filling the batch, ${label}`, () => {
    test('another tenant’s request runs at once, and every paused answer resumes to its last token', async (t) => {
      const server = await start();
      try {
        const t0 = performance.now();
        const started: Promise<void>[] = [];
        const fills: Promise<TimedStream>[] = [];
        for (let i = 0; i < BATCH; i++)
          started.push(
            new Promise((resolve) => fills.push(timedStream(server, 'fill', FILL_PROMPT, FILL_TOKENS, t0, resolve))),
          );
        await Promise.all(started); // every slot of the batch is fill's, each answer hundreds of steps from its end
        const sentAt = performance.now() - t0;
        const probe = await timedStream(server, 'probe', PROBE_PROMPT, PROBE_TOKENS, t0);
        const filled = await Promise.all(fills);
        assert.deepEqual([probe.status, probe.tokens], [200, PROBE_TOKENS]);
        for (const fill of filled) assert.deepEqual([fill.status, fill.tokens], [200, FILL_TOKENS]);
        const firstEnd = Math.min(...filled.map((f) => f.endAt));
        const times = `probe sent at ${sentAt.toFixed(0)} ms, ended at ${probe.endAt.toFixed(0)}; fill's first end ${firstEnd.toFixed(0)}`;
        t.diagnostic(times);
        // without pausing, the probe waits for a slot, and only the end of one of fill's answers frees one
        assert.ok(probe.endAt < firstEnd, times);
        await server.whole();
      } finally {
        await server.close();
      }
    });
  });
}
