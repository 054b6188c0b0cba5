/**
 * The mutation self-test (README.md): `kvfence audit` against the real colocated server and against each seeded
 * isolation mutant. The real server must come out clean (exit 0) in both settings the mutants use; every mutant whose
 * fault can reach a response must be flagged (exit 4) with the finding kind its scenario produces. The stale-epoch
 * mutant is black-box equivalent (README.md): the audit stays clean, and the test checks instead that kvfence's own
 * remaining I3 checks stopped the stale tables and recorded incidents.
 *
 * Two tenants, 8-token answers: ~106 requests and 3-7 s per audit on two busy cores.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AUDIT_EXIT } from '../../src/audit/findings.js';
import { describeRun, makeLiveTenants, runLiveAudit } from '../audit-live/live-audit-helpers.js';
import { auditCase, caseTitle, type MutantCase } from './mutant-case.js';
import { MUTANTS, type MutantServerSettings, type Mutants, startMutantServer } from './mutant-server.js';

/** Admission waits end after 250 ms with 2 running: storms meet queue timeouts (what mutant (e) turns into 200s). */
const TIGHT_QUEUE: Partial<MutantServerSettings> = { runningMax: 2, queueTimeoutMs: 250 };

interface Case extends MutantCase<Mutants> {
  settings?: Partial<MutantServerSettings>;
}

const CASES: readonly Case[] = [
  { name: 'the real server', mutants: {} },
  { name: 'the real server with a tight admission queue', mutants: {}, settings: TIGHT_QUEUE },
  { name: '(a) placeholder', mutants: MUTANTS.placeholder, caughtBy: ['context_oversize_served'] },
  {
    name: '(b) use_after_free',
    mutants: MUTANTS.use_after_free,
    caughtBy: ['interruption_wrong_answer', 'storm_wrong_answer', 'noninterference'],
  },
  {
    name: '(e) abort_as_success',
    mutants: MUTANTS.abort_as_success,
    settings: TIGHT_QUEUE,
    caughtBy: ['storm_wrong_answer', 'noninterference'],
  },
];

describe('mutation self-test: the auditor against seeded isolation mutants', { timeout: 300_000 }, () => {
  for (const c of CASES) {
    it(caseTitle(c), () => auditCase(c, (keys) => startMutantServer(c.mutants, keys, c.settings)));
  }

  it('(c) stale_epoch: black-box equivalent; the owner and state checks stop every stale table', async () => {
    const tenants = makeLiveTenants(2);
    const server = await startMutantServer(MUTANTS.stale_epoch, tenants.serverKeysPath);
    try {
      const run = await runLiveAudit(server.url, tenants.auditKeysPath);
      assert.equal(run.exitCode, AUDIT_EXIT.clean, describeRun(run));
      const incidents = server.incidents.list();
      assert.ok(incidents.length > 0, 'cancelled requests kept running on freed pages and were stopped');
      for (const incident of incidents) {
        assert.match(
          incident.reason,
          /owned by someone else|not active|only \d+ were written/,
          JSON.stringify(incident),
        );
      }
    } finally {
      await server.close();
    }
  });
});
