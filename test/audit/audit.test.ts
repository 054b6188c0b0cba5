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
      'hiddenLeak',
      'failAll',
      'failUnderLoad',
      'error200',
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

  it('reports a probe that answered alone and failed under load as a noninterference finding', async () => {
    const run = await audit(servers.get('failUnderLoad')!, { scenarios: ['noninterference'] });
    assert.equal(run.exitCode, AUDIT_EXIT.findings, run.stdout);
    const failed = scenario(run.report, 'noninterference').findings;
    assert.ok(failed.length > 0, run.stdout);
    for (const f of failed) assert.deepEqual([f.kind, f.evidence['underLoad']], ['noninterference_wrong_status', 500]);
  });

  it('says "cannot certify" (not a leak) for an endpoint that is not deterministic even alone', async () => {
    const run = await audit(servers.get('nondeterministic')!);
    assert.equal(run.exitCode, AUDIT_EXIT.cannotCertify, run.stdout);
    assert.equal(scenario(run.report, 'noninterference').verdict, 'cannot_certify');
    assert.ok(scenario(run.report, 'noninterference').notes.some((n) => /not deterministic alone/.test(n)));
    assert.equal(scenario(run.report, 'canaries').verdict, 'pass');
    assert.match(run.stdout, /CANNOT CERTIFY/);
  });

  it('reads the whole body: another tenant’s prompt in a choice it never asked for is a canary leak', async () => {
    for (const api of ['completions', 'chat'] as const) {
      const run = await audit(servers.get('hiddenLeak')!, { api, scenarios: ['canaries'] });
      assert.equal(run.exitCode, AUDIT_EXIT.findings, run.stdout);
      const leaks = scenario(run.report, 'canaries').findings.filter((f) => f.kind === 'canary_leak');
      assert.ok(leaks.length > 0, run.stdout);
      assert.ok(
        leaks.every((f) => /^body field choices\[1\]/.test(String(f.evidence['where']))),
        run.stdout,
      );
      const streamed = new Set(run.report.calls.filter((c) => c['stream'] === true).map((c) => c['id']));
      assert.ok(
        leaks.some((f) => streamed.has(f.evidence['readerCall'])),
        'a streamed leak',
      );
      assert.ok(
        leaks.some((f) => !streamed.has(f.evidence['readerCall'])),
        'a whole-body leak',
      );
    }
  });

  it('does not call an endpoint that fails every request clean: canaries cannot certify', async () => {
    const run = await audit(servers.get('failAll')!, { scenarios: ['canaries'] });
    assert.equal(run.exitCode, AUDIT_EXIT.cannotCertify, run.stdout);
    assert.ok(scenario(run.report, 'canaries').notes.some((n) => /no canary request of alpha, beta completed/.test(n)));
  });

  it('counts a 200 carrying an error object as a refusal, and prints the server’s strings escaped', async () => {
    const run = await audit(servers.get('error200')!, { scenarios: ['context'] });
    assert.equal(run.exitCode, AUDIT_EXIT.findings, run.stdout);
    const kinds = scenario(run.report, 'context').findings.map((f) => f.kind);
    assert.ok(kinds.includes('context_advertised_refused'), run.stdout);
    assert.ok(kinds.includes('context_wrong_status'), run.stdout);
    assert.ok(!run.stdout.includes('\u001b'), 'no escape character reaches the terminal');
    assert.match(run.stdout, /\\u001b\[2J/);
    assert.equal(run.stdout.match(/^verdict:/gm)?.length, 1, 'one verdict line');
    assert.match(run.stdout, /^verdict: FINDINGS/m);
  });

  it('keeps what a scenario found before the request budget ran out', async () => {
    const settled = () => new Promise((resolve) => setTimeout(resolve, 200)); // the fake's damage from earlier runs
    await settled();
    const full = await audit(servers.get('brokenAfterCancel')!, { concurrency: 1, scenarios: ['interruptions'] });
    const used = full.report.requests;
    const findings = scenario(full.report, 'interruptions').findings;
    assert.ok(findings.length > 1, full.stdout);
    // a budget that ends the scenario after its first finding's calls
    const firstFindingCall = Math.max(...findings[0]!.calls);
    assert.ok(firstFindingCall < used, full.stdout);
    await settled();
    const cut = await audit(servers.get('brokenAfterCancel')!, {
      concurrency: 1,
      scenarios: ['interruptions'],
      requests: firstFindingCall + 1,
    });
    const interruptions = scenario(cut.report, 'interruptions');
    assert.ok(
      interruptions.notes.some((n) => /budget/.test(n)),
      cut.stdout,
    );
    assert.ok(interruptions.findings.length > 0, cut.stdout);
    assert.equal(interruptions.verdict, 'finding');
    assert.equal(cut.exitCode, AUDIT_EXIT.findings, cut.stdout);
  });

  it('stops at the request budget and says so', async () => {
    const run = await audit(servers.get('honest')!, { requests: 40 });
    assert.ok(run.report.requests <= 40);
    assert.equal(run.exitCode, AUDIT_EXIT.cannotCertify);
    assert.ok(run.report.scenarios.some((s) => s.notes.some((n) => /budget/.test(n))));
  });
});
