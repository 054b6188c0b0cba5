/**
 * The mutation self-test (README.md): `kvfence audit` against the real colocated server and against each seeded
 * isolation mutant. The real server must come out clean (exit 0) in every setting the mutants use; every mutant must
 * be flagged (exit 4) with the finding kind its fault produces. (c)'s fault alone, with the epoch check on, must give
 * honest errors only: the check under test is what stands between that fault and wrong content.
 *
 * Two tenants, 8-token answers: ~106 requests and 3-7 s per audit on two busy cores. The prompt-cache cases run that
 * timing scenario alone, for one tenant pair (~98 requests of one token each): (f) must be flagged, the real server
 * with and without its prefix cache must pass with the note that says which.
 */
import { describe, it } from 'node:test';
import { auditCase, caseTitle, type MutantCase } from './mutant-case.js';
import { MUTANTS, type MutantServerSettings, startMutantServer } from './mutant-server.js';
import type { SeededFaults } from './seeded-faults.js';

/**
 * The timing scenario alone (the other scenarios are audited by the cases above it), one tenant pair (tenant-1's
 * prefixes, tenant-2 attacking): ~98 requests of one token; each test at alpha 1e-6.
 */
const PROMPT_CACHE = { scenarios: ['prompt_cache'], cachePairs: 1 } as const;

/** Admission waits end after 250 ms with 2 running: storms meet queue timeouts (what mutant (e) turns into 200s). */
const TIGHT_QUEUE: Partial<MutantServerSettings> = { runningMax: 2, queueTimeoutMs: 250 };

/**
 * A prefix cache of 16 pages a tenant: what the audit's first scenarios cache fits, so their solo answers are the
 * reference; the load of the later ones evicts pages that probes then ask for again (`checkExercised` asserts both).
 */
const SMALL_CACHE: Partial<MutantServerSettings> = { prefixCachePages: 16 };

interface Case extends MutantCase<SeededFaults> {
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
  { name: 'the real server with a small prefix cache', mutants: {}, settings: SMALL_CACHE },
  {
    name: '(c) stale_epoch',
    mutants: MUTANTS.stale_epoch,
    settings: SMALL_CACHE,
    caughtBy: ['noninterference', 'storm_wrong_answer', 'interruption_wrong_answer'],
  },
  {
    name: '(c) fault alone (epoch checked)',
    mutants: { staleIndex: true },
    settings: SMALL_CACHE,
    caughtBy: ['storm_wrong_status', 'interruption_wrong_status'],
    never: ['noninterference', 'storm_wrong_answer', 'interruption_wrong_answer'],
  },
  {
    name: 'the real server, prompt-cache timing: no cache',
    mutants: {},
    audit: PROMPT_CACHE,
    note: /no cache detected/,
  },
  {
    name: 'the real server with a small prefix cache, prompt-cache timing: within a tenant',
    mutants: {},
    settings: SMALL_CACHE,
    audit: PROMPT_CACHE,
    note: /caches within a tenant/,
  },
  {
    name: '(f) tenantless_prefix',
    mutants: { tenantlessPrefix: true, pool: { sharedTenantUnchecked: true } },
    settings: SMALL_CACHE,
    audit: PROMPT_CACHE,
    caughtBy: ['prompt_cache_shared_across_tenants'],
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
});
