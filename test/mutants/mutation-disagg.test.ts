/**
 * The mutation self-test on the disaggregated path (README.md): `kvfence audit` against the real prefill/decode
 * cluster (clean, exit 0) and against mutant (d) `checksum_unchecked` — decode stores a PAGE without comparing its
 * bytes with the checksum sealed at prefill, and the prefill worker stages every job's pages in one shared area. The
 * auditor's concurrent traffic makes sends overlap, so requests decode from another request's KV; it must be flagged
 * (exit 4). The fault alone (checksum check on) must never serve wrong content: the mixed-up transfers fail, and the
 * auditor sees errors.
 */
import { describe, it } from 'node:test';
import type { FindingKind } from '../../src/audit/findings.js';
import { auditCase, caseTitle, type MutantCase } from './mutant-case.js';
import { CHECKSUM_UNCHECKED, startMutantCluster } from './mutant-cluster.js';
import type { ClusterFaults } from './seeded-faults.js';

type Case = MutantCase<ClusterFaults>;

/** Findings that mean wrong content was served (as opposed to an honest error). */
const WRONG_CONTENT: readonly FindingKind[] = [
  'canary_leak',
  'noninterference',
  'storm_wrong_answer',
  'interruption_wrong_answer',
];

const CASES: readonly Case[] = [
  { name: 'the real disaggregated server', mutants: {} },
  {
    name: '(d) checksum_unchecked',
    mutants: CHECKSUM_UNCHECKED,
    caughtBy: ['noninterference', 'storm_wrong_answer', 'interruption_wrong_answer'],
  },
  {
    name: '(d)’s fault alone (checksum check on): the mixed-up transfers fail with an error, never wrong content',
    mutants: { sharedStaging: true },
    caughtBy: ['storm_wrong_status', 'interruption_wrong_status'],
    never: WRONG_CONTENT,
  },
];

describe('mutation self-test, disaggregated: the auditor against a seeded transfer mutant', {
  timeout: 300_000,
}, () => {
  for (const c of CASES) {
    it(caseTitle(c), () => auditCase(c, (keys) => startMutantCluster(c.mutants, keys)));
  }
});
