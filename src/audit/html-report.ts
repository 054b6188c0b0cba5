/**
 * `--html FILE`: the audit as one self-contained page for people (inline CSS and inline SVG; no script, no request
 * to anywhere when it is opened): the verdict, the scenario table, every finding with its evidence and the calls it
 * names, the prompt-cache scenario's TTFT distributions and the noisy-neighbour scenario's latencies. It is built
 * from the report alone, which holds tenant names but never a key. The JSON report stays the machine-readable form.
 */
import type { AuditReport } from './auditor.js';
import type { Finding, ScenarioResult } from './findings.js';
import { median } from './ks-test.js';
import { ecdfPlot, escapeXml as esc, stripPlot } from './svg-plot.js';
import type { NoisyNeighbourTiming, PromptCacheTiming } from './timing-data.js';

const COLORS = { miss: '#c0392b', hit: '#2471a3', attack: '#d68910', baseline: '#2471a3', flood: '#c0392b' };

const CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1000px;color:#1c2833;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5d8dc;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.meta{color:#566573}
.verdict{padding:12px 16px;border-radius:6px;font-weight:600;font-size:16px;margin:16px 0}
.v-clean{background:#d4efdf;color:#145a32}.v-findings{background:#fadbd8;color:#78281f}.v-cannot_certify{background:#fcf3cf;color:#7d6608}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border:1px solid #d5d8dc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#145a32;font-weight:600}.finding{color:#922b21;font-weight:700}.cannot_certify{color:#9a7d0a;font-weight:600}.skipped{color:#808b96}
.card{border:1px solid #e6b0aa;border-left:6px solid #c0392b;border-radius:4px;padding:8px 12px;margin:10px 0;background:#fdfefe}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}pre{white-space:pre-wrap;word-break:break-all;background:#f8f9f9;padding:6px;margin:2px 0}
ul.notes{margin:4px 0;padding-left:20px;color:#424949}
svg.plot{display:block;margin:6px 0;font:11px system-ui,sans-serif}svg .area{fill:#fbfcfc;stroke:#aab7b8}
svg .grid{stroke:#e5e8e8}svg .bound{stroke:#7b241c;stroke-dasharray:6 4;stroke-width:1.5}
`;

const VERDICT_LINE = {
  clean: 'Clean: no findings, every scenario passed',
  cannot_certify: 'Cannot certify: no findings, but some scenario could not decide (see its notes)',
  findings: 'Findings: the endpoint broke isolation or correctness (details below)',
} as const;

export function formatHtmlReport(report: AuditReport): string {
  const parts = [
    `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">`,
    `<meta name="viewport" content="width=device-width, initial-scale=1">`,
    `<title>kvfence audit of ${esc(report.target)}</title><style>${CSS}</style></head><body>`,
    `<h1>kvfence audit</h1>`,
    `<div class="meta">${esc(report.target)} · model <code>${esc(report.model)}</code> · ${report.tenants.length} tenants (${esc(report.tenants.join(', '))}) · ` +
      `context ${report.context.used ?? 'unknown'} · ${report.requests} requests in ${(report.durationMs / 1000).toFixed(1)} s · ` +
      `seed ${report.seed} · started ${esc(report.startedAt)} · logprob tolerance ${esc(String(report.logprobTolerance.setting))}` +
      `${report.logprobTolerance.setting === 'auto' ? ` (measured ${report.logprobTolerance.used.toExponential(2)})` : ''}</div>`,
    `<div class="verdict v-${report.verdict}">${esc(VERDICT_LINE[report.verdict])} · exit code ${report.exitCode}</div>`,
    scenarioTable(report.scenarios),
    findingsSection(report),
  ];
  if (report.timing.promptCache !== undefined) parts.push(promptCacheSection(report.timing.promptCache));
  if (report.timing.noisyNeighbour !== undefined) parts.push(noisySection(report.timing.noisyNeighbour));
  parts.push(notesSection(report.scenarios), '</body></html>\n');
  return parts.join('\n');
}

function scenarioTable(scenarios: readonly ScenarioResult[]): string {
  const rows = scenarios
    .map(
      (s) =>
        `<tr><td>${esc(s.scenario)}</td><td class="${s.verdict}">${esc(s.verdict.replace('_', ' '))}</td>` +
        `<td class="num">${s.requests}</td><td class="num">${s.findings.length}</td><td>${esc(s.notes[0] ?? '')}</td></tr>`,
    )
    .join('');
  return `<h2>Scenarios</h2><table><tr><th>scenario</th><th>verdict</th><th>requests</th><th>findings</th><th>note</th></tr>${rows}</table>`;
}

function findingsSection(report: AuditReport): string {
  const findings = report.scenarios.flatMap((s) => s.findings);
  if (findings.length === 0) return '<h2>Findings</h2><p>None.</p>';
  const calls = new Map(report.calls.map((c) => [c['id'], c]));
  return `<h2>Findings (${findings.length})</h2>${findings.map((f) => findingCard(f, calls)).join('')}`;
}

function findingCard(f: Finding, calls: Map<unknown, Record<string, unknown>>): string {
  const evidence = Object.entries(f.evidence)
    .map(([k, v]) => `<tr><th>${esc(k)}</th><td><code>${esc(JSON.stringify(v))}</code></td></tr>`)
    .join('');
  const named = f.calls
    .map((id) => calls.get(id))
    .filter((c): c is Record<string, unknown> => c !== undefined)
    .map(
      (c) =>
        `<tr><td class="num">${esc(String(c['id']))}</td><td>${esc(String(c['tenant']))}</td><td>${esc(String(c['label']))}</td>` +
        `<td class="num">${esc(String(c['status']))}</td><td class="num">${esc(String(c['firstTokenMs'] ?? '-'))}</td>` +
        `<td><pre>${esc(String(c['promptExcerpt']).slice(0, 300))}</pre></td><td><pre>${esc(String(c['text']).slice(0, 300))}</pre></td></tr>`,
    )
    .join('');
  return (
    `<div class="card"><h3>${esc(f.kind)} <span class="meta">[${esc(f.scenario)}]</span></h3><p>${esc(f.summary)}</p>` +
    `<p class="meta">tenants: ${esc(f.tenants.join(', '))} · calls: ${esc(f.calls.join(', '))}</p>` +
    `<table>${evidence}</table>` +
    (named === ''
      ? ''
      : `<table><tr><th>call</th><th>tenant</th><th>label</th><th>status</th><th>TTFT ms</th><th>prompt (excerpt)</th><th>answer</th></tr>${named}</table>`) +
    `</div>`
  );
}

function promptCacheSection(t: PromptCacheTiming): string {
  const pairs = t.pairs
    .map((p) => {
      const plot = ecdfPlot(`TTFT of ${p.victim} -> ${p.attacker}`, [
        { name: 'miss (fresh prefix)', color: COLORS.miss, values: p.missMs },
        { name: `hit (${p.victim} again)`, color: COLORS.hit, values: p.hitMs },
        { name: `attack (${p.attacker})`, color: COLORS.attack, values: p.attackMs },
      ]);
      return (
        `<h3>victim ${esc(p.victim)}, attacker ${esc(p.attacker)}: <span class="${p.verdict === 'shared' ? 'finding' : p.verdict === 'cannot_certify' ? 'cannot_certify' : 'pass'}">${esc(p.verdict.replace('_', ' '))}</span></h3>` +
        `<p class="meta">median TTFT: miss ${median(p.missMs).toFixed(1)} ms, hit ${median(p.hitMs).toFixed(1)} ms, attack ${median(p.attackMs).toFixed(1)} ms · ` +
        `p(attack faster than miss) = ${p.pAttackFaster.toExponential(2)} · p(hit faster than miss) = ${p.pHitFaster.toExponential(2)} · ` +
        `p(hit faster than attack) = ${p.pHitFasterThanAttack.toExponential(2)} · detectable saving ${Number.isFinite(p.detectableMs) ? p.detectableMs.toFixed(1) : '∞'} ms</p>${plot}`
      );
    })
    .join('');
  return (
    `<h2>Prompt cache: time to first token</h2>` +
    `<p>Prefix of ${t.prefixTokens} tokens (${t.prefixWords} words; expected saving of a cache hit ${t.expectedSavingMs.toFixed(1)} ms), ` +
    `${t.samplesPerProcedure} samples per procedure. Exact one-sided two-sample Kolmogorov–Smirnov tests at ${t.testAlpha.toExponential(1)} each ` +
    `(family-wise ${t.familyAlpha}, Bonferroni); detectable saving: the speed-up found with power ${t.power}. ` +
    `The curves are empirical CDFs: a curve to the left is faster; the KS statistic is the largest vertical gap.</p>${pairs}`
  );
}

function noisySection(t: NoisyNeighbourTiming): string {
  const plot = stripPlot(
    `${t.victim}'s probe latency`,
    [
      { name: `beside ${t.baselineStreams} benign streams`, color: COLORS.baseline, values: t.baselineMs },
      { name: `beside a flood of ${t.floodStreams}`, color: COLORS.flood, values: t.floodMs },
    ],
    t.boundMs,
  );
  return (
    `<h2>Noisy neighbour: latency of ${esc(t.victim)}'s short requests</h2>` +
    `<p>Median ${median(t.baselineMs).toFixed(0)} ms beside ${esc(t.flooder)}'s benign load, ` +
    `${t.floodMs.length > 0 ? median(t.floodMs).toFixed(0) : '–'} ms beside its flood (ratio ${Number.isFinite(t.ratio) ? t.ratio.toFixed(2) : '∞'}; ` +
    `bound ${t.boundMs.toFixed(0)} ms). Flood: ${t.floodRequests} requests, statuses <code>${esc(JSON.stringify(t.floodStatuses))}</code>.</p>${plot}`
  );
}

function notesSection(scenarios: readonly ScenarioResult[]): string {
  const blocks = scenarios
    .filter((s) => s.notes.length > 0)
    .map(
      (s) => `<h3>${esc(s.scenario)}</h3><ul class="notes">${s.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>`,
    )
    .join('');
  return `<h2>Notes</h2>${blocks}`;
}
