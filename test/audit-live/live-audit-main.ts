/**
 * By hand: the live audit at full size (CI runs a smaller one in live-audit.test.ts).
 *
 *   npx tsc -p tsconfig.json && node dist/test/audit-live/live-audit-main.js [colocated|colocated-cache|disaggregated] \
 *     [requests] [tenants]
 *
 * Starts the deployment on the tiny test model with N tenants (default 8), audits it until at least `requests`
 * (default 2000) were sent, prints every audit's summary line and the totals; exits 0 when every audit was clean.
 */

import { auditUntil, describeRun, makeLiveTenants } from './live-audit-helpers.js';
import { type DeploymentKind, startLiveDeployment } from './live-deployments.js';

const kind = (process.argv[2] ?? 'colocated') as DeploymentKind;
const requestsMin = Number(process.argv[3] ?? 2000);
const tenantCount = Number(process.argv[4] ?? 8);
if (!['colocated', 'colocated-cache', 'disaggregated'].includes(kind)) throw new Error(`unknown deployment ${kind}`);
if (!Number.isInteger(requestsMin) || requestsMin < 40) throw new Error('requests: an integer >= 40');
if (!Number.isInteger(tenantCount) || tenantCount < 2 || tenantCount > 64) throw new Error('tenants: 2..64');

const tenants = makeLiveTenants(tenantCount);
const started = performance.now();
const deployment = await startLiveDeployment(kind, tenants.serverKeysPath);
const startMs = performance.now() - started;
try {
  const series = await auditUntil(deployment.url, tenants.auditKeysPath, requestsMin, {}, 40, (run, i) => {
    const r = run.report;
    process.stdout.write(
      `audit ${i + 1} (seed ${r.seed}): exit ${run.exitCode}, ${r.requests} requests, ${(run.wallMs / 1000).toFixed(1)} s, ` +
        `${r.scenarios.map((s) => `${s.scenario} ${s.verdict}`).join(', ')}\n`,
    );
    if (run.exitCode !== 0) process.stdout.write(describeRun(run));
  });
  const clean = series.runs.every((r) => r.exitCode === 0);
  process.stdout.write(
    `${kind}: ${tenantCount} tenants, ${series.runs.length} audits, ${series.requests} requests, ` +
      `${(series.wallMs / 1000).toFixed(1)} s of audits (+${(startMs / 1000).toFixed(1)} s start): ` +
      `${clean ? 'clean' : 'NOT CLEAN'}\n`,
  );
  await deployment.assertIdle();
  if (deployment.cacheSummary !== undefined) process.stdout.write(`${deployment.cacheSummary()}\n`);
  process.exitCode = clean ? 0 : 4;
} finally {
  await deployment.close();
}
