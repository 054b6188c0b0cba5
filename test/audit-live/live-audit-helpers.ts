/**
 * The auditor against a live kvfence: tenants with fresh random keys (the server's key file gets only their hashes,
 * the auditor's key file the plaintext, mode 0600, exactly as docs/audit.md tells an operator), and audit runs
 * through `runAuditCommand` — what `kvfence audit` runs — with their report, output and wall time.
 *
 * One audit's plan is fixed by the tenants (noninterference, canaries, context, interruptions, storms: ~55 requests a
 * tenant); `--requests` only caps it. A larger total is several audits in a row with different seeds against the
 * same server (`auditUntil`), each one a complete audit that must come out clean.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AuditReport } from '../../src/audit/auditor.js';
import { type AuditCliOptions, runAuditCommand } from '../../src/cli/audit-command.js';
import { hashApiKey } from '../../src/gateway/tenants.js';
import { tempDirectory } from '../helpers/temp.js';

const dir = tempDirectory('kvfence-audit-live-');
let files = 0;

export interface LiveTenants {
  names: string[];
  /** the server's key file: hashes only */
  serverKeysPath: string;
  /** the auditor's key file: "tenant key" lines, plaintext, mode 0600 */
  auditKeysPath: string;
}

/** `count` tenants (tenant-1 … tenant-N), each with one fresh random key. */
export function makeLiveTenants(
  count: number,
  limits: Record<string, { concurrentRequestsMax?: number; kvPagesMax?: number }> = {},
): LiveTenants {
  const names = Array.from({ length: count }, (_, i) => `tenant-${i + 1}`);
  const keys = names.map((tenant) => ({ tenant, key: `kvf-${randomBytes(24).toString('base64url')}` }));
  const n = files++;
  const serverKeysPath = join(dir, `server-keys-${n}.json`);
  const auditKeysPath = join(dir, `audit-keys-${n}.txt`);
  writeFileSync(
    serverKeysPath,
    JSON.stringify({ keys: keys.map(({ tenant, key }) => ({ tenant, sha256: hashApiKey(key) })), tenants: limits }),
  );
  writeFileSync(auditKeysPath, `# tenant key\n${keys.map(({ tenant, key }) => `${tenant} ${key}`).join('\n')}\n`, {
    mode: 0o600,
  });
  return { names, serverKeysPath, auditKeysPath };
}

export interface LiveAuditRun {
  exitCode: number;
  report: AuditReport;
  stdout: string;
  stderr: string;
  wallMs: number;
}

/**
 * Small answers and a short per-request timeout: the tiny model on two busy cores. The content scenarios only: the
 * timing scenarios (prompt_cache, noisy_neighbour) have their own tests (test/audit/, test/mutants/).
 */
export const LIVE_AUDIT_DEFAULTS: Omit<AuditCliOptions, 'target' | 'keys'> = {
  requests: 2000,
  concurrency: 8,
  seed: 1,
  api: 'completions',
  maxTokens: 8,
  timeout: 60_000,
  logprobTolerance: 0,
  matchChars: 12,
  stormSize: 32,
  scenarios: ['noninterference', 'canaries', 'context', 'interruptions', 'storms'],
};

/** One audit, in-process, as `kvfence audit --target URL --keys FILE --json …` runs it. */
export async function runLiveAudit(
  target: string,
  auditKeysPath: string,
  options: Partial<AuditCliOptions> = {},
): Promise<LiveAuditRun> {
  const json = join(dir, `report-${files++}.json`);
  let stdout = '';
  let stderr = '';
  const started = performance.now();
  const exitCode = await runAuditCommand(
    { ...LIVE_AUDIT_DEFAULTS, target, keys: auditKeysPath, json, ...options },
    {
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { isTTY: false, write: (t: string) => (stderr += t) },
    },
  );
  const wallMs = performance.now() - started;
  const report = JSON.parse(readFileSync(json, 'utf8')) as AuditReport;
  return { exitCode, report, stdout, stderr, wallMs };
}

export interface AuditSeries {
  runs: LiveAuditRun[];
  requests: number;
  wallMs: number;
}

/**
 * Audits with seeds seed, seed+1, … until `requestsMin` requests were sent in all (at most `runsMax` audits); stops at
 * the first audit that is not clean (the caller asserts on it).
 */
export async function auditUntil(
  target: string,
  auditKeysPath: string,
  requestsMin: number,
  options: Partial<AuditCliOptions> = {},
  runsMax = 20,
  onRun: (run: LiveAuditRun, index: number) => void = () => {},
): Promise<AuditSeries> {
  const runs: LiveAuditRun[] = [];
  let requests = 0;
  const started = performance.now();
  const seed = options.seed ?? LIVE_AUDIT_DEFAULTS.seed;
  for (let i = 0; i < runsMax && requests < requestsMin; i++) {
    const run = await runLiveAudit(target, auditKeysPath, {
      ...options,
      seed: seed + i,
    });
    runs.push(run);
    requests += run.report.requests;
    onRun(run, i);
    if (run.exitCode !== 0) break;
  }
  return { runs, requests, wallMs: performance.now() - started };
}

/** A failure message worth reading: the summary of the audit (scenarios, findings, notes). */
export function describeRun(run: LiveAuditRun): string {
  return `exit ${run.exitCode}, ${run.report.requests} requests in ${(run.wallMs / 1000).toFixed(1)} s\n${run.stdout}`;
}
