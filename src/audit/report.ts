/** The human summary of an audit: one table row per scenario, then every finding with its evidence. */
import type { AuditReport } from './auditor.js';

const VERDICT_TEXT = {
  pass: 'pass',
  finding: 'FINDING',
  cannot_certify: 'cannot certify',
  skipped: 'skipped',
} as const;

export function formatSummary(report: AuditReport): string {
  const rows = report.scenarios.map((s) => [
    s.scenario,
    VERDICT_TEXT[s.verdict],
    String(s.requests),
    String(s.findings.length),
    printable(s.notes[0] ?? ''),
  ]);
  const header = ['scenario', 'verdict', 'requests', 'findings', 'note'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => Math.min(r[i]!.length, 90))));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (c.length > 90 ? `${c.slice(0, 87)}...` : c).padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const out: string[] = [
    `kvfence audit of ${report.target} (model ${report.model}, ${report.tenants.length} tenants: ` +
      `${report.tenants.join(', ')}; context ${report.context.used ?? 'unknown'})`,
    `${report.requests} requests in ${(report.durationMs / 1000).toFixed(1)} s, seed ${report.seed}`,
    '',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    '',
  ];
  for (const s of report.scenarios) {
    for (const f of s.findings) {
      out.push(`FINDING ${f.kind} [${s.scenario}] ${f.summary}`);
      out.push(`  tenants: ${f.tenants.join(', ')}; calls: ${f.calls.join(', ')}`);
      for (const [k, v] of Object.entries(f.evidence)) out.push(`  ${k}: ${JSON.stringify(v)}`);
    }
    for (const note of s.notes.slice(1)) out.push(`note [${s.scenario}] ${note}`);
  }
  const verdict = {
    clean: 'verdict: clean (no findings; every scenario passed)',
    cannot_certify: 'verdict: CANNOT CERTIFY (no findings, but some scenario could not decide; see the notes)',
    findings: 'verdict: FINDINGS (see above)',
  }[report.verdict];
  out.push('', `${verdict}; exit code ${report.exitCode}`);
  return `${out.map(printable).join('\n')}\n`;
}

/**
 * Notes, findings and the model name carry strings the audited server chose: its control characters (a terminal's
 * escape sequences, a line break that fakes a verdict line) and bidirectional overrides are printed as escapes.
 */
export function printable(line: string): string {
  return line.replace(
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is this function's job
    /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
