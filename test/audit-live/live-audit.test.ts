/**
 * `kvfence audit` against a live kvfence, colocated and disaggregated, with 8 tenants: every audit must come out clean
 * (exit 0, every scenario "pass"), and afterwards every pool is whole again with no isolation incident recorded.
 *
 * CI sends ~400 requests per deployment (two audits, 20-48 s on two busy cores). The full 2,000-request run is
 * by hand (docs/audit.md, "Auditing kvfence itself"):
 *   npx tsc -p tsconfig.json && node dist/test/audit-live/live-audit-main.js colocated 2000 8
 *   node dist/test/audit-live/live-audit-main.js disaggregated 2000 8
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AUDIT_EXIT } from '../../src/audit/findings.js';
import { startTestServer } from '../serving/serve-helpers.js';
import { auditUntil, describeRun, makeLiveTenants, runLiveAudit } from './live-audit-helpers.js';
import { type DeploymentKind, startLiveDeployment } from './live-deployments.js';

const TENANTS = 8;
const CI_REQUESTS_MIN = 400;

for (const kind of ['colocated', 'disaggregated'] as const satisfies readonly DeploymentKind[]) {
  describe(`kvfence audit against a live ${kind} kvfence`, () => {
    it(`is clean over ${CI_REQUESTS_MIN}+ requests of ${TENANTS} tenants`, { timeout: 240_000 }, async () => {
      const tenants = makeLiveTenants(TENANTS);
      const deployment = await startLiveDeployment(kind, tenants.serverKeysPath);
      try {
        const series = await auditUntil(deployment.url, tenants.auditKeysPath, CI_REQUESTS_MIN);
        for (const run of series.runs) {
          assert.equal(run.exitCode, AUDIT_EXIT.clean, describeRun(run));
          assert.deepEqual(run.report.tenants.length, TENANTS);
          for (const s of run.report.scenarios) {
            if (s.verdict !== 'skipped') assert.equal(s.verdict, 'pass', `${s.scenario}: ${s.notes.join('; ')}`);
          }
          assert.equal(run.report.scenarios.filter((s) => s.verdict === 'pass').length, 5, 'the content scenarios ran');
          const interruptions = run.report.scenarios.find((s) => s.scenario === 'interruptions')!;
          const cancelled = /(\d+) of \d+ streams cancelled mid-way/.exec(interruptions.notes.join('\n'));
          assert.ok(cancelled !== null && Number(cancelled[1]) > 0, 'streams were cancelled mid-way');
        }
        assert.ok(series.requests >= CI_REQUESTS_MIN, `${series.requests} requests sent`);
        await deployment.assertIdle();
      } finally {
        await deployment.close();
      }
    });
  });
}

describe('kvfence audit against a live kvfence with a small (256-token) context', () => {
  it('measures the context boundary (its second probe shrinks when 32 words would not fit)', async () => {
    const tenants = makeLiveTenants(2);
    const server = await startTestServer({ apiKeysPath: tenants.serverKeysPath });
    try {
      const run = await runLiveAudit(server.url, tenants.auditKeysPath);
      const context = run.report.scenarios.find((s) => s.scenario === 'context')!;
      assert.equal(context.verdict, 'pass', `${context.notes.join('; ')}\n${describeRun(run)}`);
      assert.equal(run.report.context.advertised, 256);
      assert.ok(run.exitCode !== AUDIT_EXIT.findings, describeRun(run));
    } finally {
      await server.close();
    }
  });
});
