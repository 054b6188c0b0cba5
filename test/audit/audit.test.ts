/**
 * The auditor against a fake OpenAI-compatible server: honest → clean; each misbehaving variant → the finding (or the
 * "cannot certify") it must produce, with evidence. In-process: runAuditCommand is what `kvfence audit` runs.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { AuditReport } from '../../src/audit/auditor.js';
import { AUDIT_EXIT } from '../../src/audit/findings.js';
import { type AuditCliOptions, runAuditCommand } from '../../src/cli/audit-command.js';
import { tempDirectory } from '../helpers/temp.js';
import { FAKE_KEYS_TEXT, type FakeMode, type FakeServer, startFakeServer } from './fake-openai-server.js';

const dir = tempDirectory('kvfence-audit-');
/** the content scenarios: the timing ones have their own tests (prompt-cache, noisy-neighbour) */
const CONTENT_SCENARIOS = ['noninterference', 'canaries', 'context', 'interruptions', 'storms'] as const;
const keysPath = join(dir, 'keys.txt');

interface AuditRun {
  exitCode: number;
  report: AuditReport;
  stdout: string;
  stderr: string;
}

async function audit(server: FakeServer, extra: Partial<AuditCliOptions> = {}): Promise<AuditRun> {
  const jsonPath = join(dir, `report-${Math.random().toString(36).slice(2)}.json`);
  let stdout = '';
  let stderr = '';
  const exitCode = await runAuditCommand(
    {
      target: server.url,
      keys: keysPath,
      requests: 300,
      concurrency: 6,
      json: jsonPath,
      seed: 7,
      api: 'completions',
      maxTokens: 8,
      timeout: 10_000,
      logprobTolerance: 0,
      matchChars: 12,
      stormSize: 16,
      scenarios: CONTENT_SCENARIOS,
      ...extra,
    },
    {
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { isTTY: false, write: (t: string) => (stderr += t) },
    },
  );
  const report = JSON.parse(readFileSync(jsonPath, 'utf8')) as AuditReport;
  return { exitCode, report, stdout, stderr };
}

function scenario(report: AuditReport, name: string) {
  const s = report.scenarios.find((x) => x.scenario === name);
  assert.ok(s !== undefined, `scenario ${name} in the report`);
  return s;
}

describe('kvfence audit against a fake endpoint', () => {
  const servers = new Map<FakeMode, FakeServer>();
  before(async () => {
    writeFileSync(keysPath, FAKE_KEYS_TEXT);
    for (const mode of [
      'honest',
      'leaky',
      'oversize200',
      'perturbUnderLoad',
      'nondeterministic',
      'brokenAfterCancel',
    ] as const) {
      servers.set(mode, await startFakeServer({ mode, context: 160, inFlightMax: 12, tokenDelayMs: 1 }));
    }
  });
  after(async () => {
    for (const server of servers.values()) await server.close();
  });

  it('finds nothing on an honest endpoint, and every scenario passes', async () => {
    const run = await audit(servers.get('honest')!);
    for (const s of run.report.scenarios) {
      const expected = (CONTENT_SCENARIOS as readonly string[]).includes(s.scenario) ? 'pass' : 'skipped';
      assert.equal(s.verdict, expected, `${s.scenario}: ${s.notes.join('; ')}`);
    }
    assert.equal(run.exitCode, AUDIT_EXIT.clean, run.stdout);
    assert.match(run.stdout, /verdict: clean/);
    assert.match(run.stderr, /audit canaries: pass/);
    assert.ok(run.report.requests <= 300, 'the request budget holds');
    assert.ok(scenario(run.report, 'storms').notes.some((n) => / refused/.test(n)));
  });

  it('also speaks the chat dialect', async () => {
    const run = await audit(servers.get('honest')!, { api: 'chat' });
    assert.equal(run.exitCode, AUDIT_EXIT.clean, run.stdout);
  });

  it('reports another tenant’s prompt in a response as a canary leak, with the leaked text and both tenants', async () => {
    const run = await audit(servers.get('leaky')!);
    assert.equal(run.exitCode, AUDIT_EXIT.findings);
    const canaries = scenario(run.report, 'canaries');
    assert.equal(canaries.verdict, 'finding');
    const leak = canaries.findings[0]!;
    assert.equal(leak.kind, 'canary_leak');
    assert.equal(leak.tenants.length, 2);
    assert.notEqual(leak.tenants[0], leak.tenants[1]);
    assert.ok(String(leak.evidence['marker']).includes(String(leak.evidence['leaked'])));
    assert.ok(String(leak.evidence['leaked']).length >= 12);
    assert.match(run.stdout, /FINDING canary_leak/);
  });

  it('reports a 200 for an oversize prompt (the incident) as a context finding', async () => {
    const run = await audit(servers.get('oversize200')!);
    assert.equal(run.exitCode, AUDIT_EXIT.findings);
    const context = scenario(run.report, 'context');
    assert.equal(context.verdict, 'finding');
    const kinds = new Set(context.findings.map((f) => f.kind));
    assert.deepEqual([...kinds], ['context_oversize_served']);
    const served = context.findings.map((f) => f.evidence['case']);
    assert.ok(served.includes('prompt far above') && served.includes('just above (max_tokens)'), served.join(', '));
    assert.equal(context.findings[0]!.evidence['status'], 200);
    assert.equal(scenario(run.report, 'canaries').verdict, 'pass');
  });

  it('reports logprobs that change under concurrency as a noninterference finding', async () => {
    const run = await audit(servers.get('perturbUnderLoad')!);
    assert.equal(run.exitCode, AUDIT_EXIT.findings);
    const ni = scenario(run.report, 'noninterference');
    assert.equal(ni.verdict, 'finding');
    const f = ni.findings[0]!;
    assert.equal(f.kind, 'noninterference');
    assert.equal(f.evidence['field'], 'logprob');
    assert.notEqual(f.evidence['alone'], f.evidence['underLoad']);
  });

  it('reports a request of the same tenant broken right after a cancelled stream as an interruption finding', async () => {
    const run = await audit(servers.get('brokenAfterCancel')!, { concurrency: 1 });
    assert.equal(run.exitCode, AUDIT_EXIT.findings, run.stdout);
    const broken = scenario(run.report, 'interruptions').findings.filter((f) => f.kind === 'interruption_wrong_status');
    assert.ok(broken.length > 0, run.stdout);
    for (const f of broken) assert.equal(f.evidence['status'], 500);
    assert.ok(
      broken.some((f) => f.tenants[0] === f.tenants[1]),
      'a probe of the cancelled stream’s own tenant ran right after it',
    );
    assert.equal(scenario(run.report, 'noninterference').verdict, 'pass');
  });

  it('says "cannot certify" (not a leak) for an endpoint that is not deterministic even alone', async () => {
    const run = await audit(servers.get('nondeterministic')!);
    assert.equal(run.exitCode, AUDIT_EXIT.cannotCertify, run.stdout);
    assert.equal(scenario(run.report, 'noninterference').verdict, 'cannot_certify');
    assert.ok(scenario(run.report, 'noninterference').notes.some((n) => /not deterministic alone/.test(n)));
    assert.equal(scenario(run.report, 'canaries').verdict, 'pass');
    assert.match(run.stdout, /CANNOT CERTIFY/);
  });

  it('stops at the request budget and says so', async () => {
    const run = await audit(servers.get('honest')!, { requests: 40 });
    assert.ok(run.report.requests <= 40);
    assert.equal(run.exitCode, AUDIT_EXIT.cannotCertify);
    assert.ok(run.report.scenarios.some((s) => s.notes.some((n) => /budget/.test(n))));
  });
});
