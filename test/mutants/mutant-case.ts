/**
 * One mutation self-test case, colocated or disaggregated: which server, what the audit of it must show. `auditCase`
 * runs the audit (two tenants, `runLiveAudit`) against a started server and asserts the verdict.
 */
import assert from 'node:assert/strict';
import type { AuditReport } from '../../src/audit/auditor.js';
import { AUDIT_EXIT, type FindingKind } from '../../src/audit/findings.js';
import type { AuditCliOptions } from '../../src/cli/audit-command.js';
import type { IncidentStore } from '../../src/incidents/incident-store.js';
import { describeRun, makeLiveTenants, runLiveAudit } from '../audit-live/live-audit-helpers.js';

export interface MutantCase<M> {
  name: string;
  mutants: M;
  /** finding kinds of which at least one must be reported (undefined: the audit must be clean) */
  caughtBy?: readonly FindingKind[];
  /** finding kinds that must not be reported */
  never?: readonly FindingKind[];
  /** audit options besides the live audit's (e.g. the scenarios) */
  audit?: Partial<AuditCliOptions>;
  /** a note that some scenario of the audit must carry */
  note?: RegExp;
}

export interface AuditedServer {
  url: string;
  incidents: IncidentStore;
  /** after the audit: asserts the audit's traffic reached what the case exercises (a prefix cache's evictions) */
  checkExercised?(): void;
  close(): Promise<void>;
}

export function caseTitle(c: MutantCase<unknown>): string {
  return `${c.name}: ${c.caughtBy === undefined ? 'clean (exit 0)' : `flagged (exit 4: ${c.caughtBy.join(' | ')})`}`;
}

function kindsOf(report: AuditReport): Set<FindingKind> {
  return new Set(report.scenarios.flatMap((s) => s.findings.map((f) => f.kind)));
}

/** Starts the case's server with the tenants' key file, audits it, checks the verdict, closes it. */
export async function auditCase<M>(
  c: MutantCase<M>,
  start: (serverKeysPath: string) => Promise<AuditedServer>,
): Promise<void> {
  const tenants = makeLiveTenants(2);
  const server = await start(tenants.serverKeysPath);
  try {
    const run = await runLiveAudit(server.url, tenants.auditKeysPath, c.audit);
    const kinds = kindsOf(run.report);
    if (c.caughtBy === undefined) {
      assert.equal(run.exitCode, AUDIT_EXIT.clean, describeRun(run));
      assert.equal(server.incidents.list().length, 0, 'no isolation incident on the real server');
    } else {
      assert.equal(run.exitCode, AUDIT_EXIT.findings, describeRun(run));
      assert.ok(
        c.caughtBy.some((k) => kinds.has(k)),
        `expected one of ${c.caughtBy.join(', ')}; got ${[...kinds].join(', ')}`,
      );
    }
    assert.ok(!kinds.has('canary_leak'), 'no mutant here can make the random-weight model spell a marker');
    for (const kind of c.never ?? []) assert.ok(!kinds.has(kind), `${kind} reported: ${describeRun(run)}`);
    if (c.note !== undefined) {
      const notes = run.report.scenarios.flatMap((s) => s.notes);
      assert.ok(
        notes.some((n) => c.note!.test(n)),
        `a note matching ${c.note}: ${describeRun(run)}`,
      );
    }
    server.checkExercised?.();
  } finally {
    await server.close();
  }
}
