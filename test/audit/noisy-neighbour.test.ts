/**
 * The noisy-neighbour scenario (opt-in): a fake endpoint that serves every request strictly first-come-first-served,
 * whoever sent it, lets one tenant's flood stall the other's short requests — flagged; kvfence, colocated and
 * disaggregated, with per-tenant limits in its key file (the flooder: 2 requests at once, as many as the baseline's
 * benign streams), passes. The victim is the key file's first tenant, the flooder its second.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { AUDIT_EXIT } from '../../src/audit/findings.js';
import { BOUND_FACTOR, BOUND_SLACK_MS } from '../../src/audit/scenario-noisy-neighbour.js';
import { describeRun, makeLiveTenants, runLiveAudit } from '../audit-live/live-audit-helpers.js';
import { liveServeSettings } from '../audit-live/live-deployments.js';
import { startTestCluster } from '../disagg/cluster-helpers.js';
import { tempDirectory } from '../helpers/temp.js';
import { startTestServer } from '../serving/serve-helpers.js';
import { FAKE_KEYS_TEXT, startFakeServer } from './fake-openai-server.js';

const NOISY = { scenarios: ['noisy_neighbour'] as const, concurrency: 8, maxTokens: 4 };

function noisy(run: Awaited<ReturnType<typeof runLiveAudit>>) {
  const s = run.report.scenarios.find((x) => x.scenario === 'noisy_neighbour')!;
  const t = run.report.timing.noisyNeighbour!;
  return { s, t };
}

describe('noisy_neighbour scenario', { timeout: 120_000 }, () => {
  it('flags an endpoint that serves tenants strictly first-come-first-served behind one slow tenant', async () => {
    const dir = tempDirectory('kvfence-audit-noisy-');
    const keys = join(dir, 'keys.txt');
    writeFileSync(keys, FAKE_KEYS_TEXT);
    // 0.2 ms a word, 0.5 ms a token: a 119-word flood request holds the line ~26 ms
    const server = await startFakeServer({
      mode: 'honest',
      context: 160,
      inFlightMax: 256,
      tokenDelayMs: 0.5,
      prefillMsPerWord: 0.2,
      fcfs: true,
    });
    try {
      const run = await runLiveAudit(server.url, keys, NOISY);
      const { s, t } = noisy(run);
      assert.equal(run.exitCode, AUDIT_EXIT.findings, describeRun(run));
      assert.equal(s.verdict, 'finding');
      assert.equal(s.findings[0]!.kind, 'noisy_neighbour_slowdown');
      assert.deepEqual(s.findings[0]!.tenants, ['alpha', 'beta']);
      assert.equal(t.baselineStreams, 2);
      assert.equal(t.floodStreams, 32);
      assert.equal(t.boundMs, BOUND_FACTOR * median(t.baselineMs) + BOUND_SLACK_MS);
      assert.ok(t.ratio > BOUND_FACTOR, `ratio ${t.ratio}`);
      process.stdout.write(`# fcfs fake: ratio ${t.ratio.toFixed(2)}, bound ${t.boundMs.toFixed(0)} ms\n`);
    } finally {
      await server.close();
    }
  });

  for (const kind of ['colocated', 'disaggregated'] as const) {
    it(`passes kvfence ${kind} with per-tenant limits`, async () => {
      const tenants = makeLiveTenants(2, { 'tenant-2': { concurrentRequestsMax: 2 } });
      const serve = liveServeSettings(tenants.serverKeysPath);
      const deployment = kind === 'colocated' ? await startTestServer(serve) : await startTestCluster({ serve });
      try {
        const run = await runLiveAudit(deployment.url, tenants.auditKeysPath, NOISY);
        const { s, t } = noisy(run);
        assert.equal(s.verdict, 'pass', describeRun(run));
        assert.equal(run.exitCode, AUDIT_EXIT.clean, describeRun(run));
        assert.ok((t.floodStatuses['429'] ?? 0) > 0, 'the flood went past its quota and was refused');
        assert.equal(t.floodMs.length, 6, 'every probe was answered under the flood');
        process.stdout.write(`# kvfence ${kind}: ratio ${t.ratio.toFixed(2)}, bound ${t.boundMs.toFixed(0)} ms\n`);
      } finally {
        await deployment.close();
      }
    });
  }
});

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
