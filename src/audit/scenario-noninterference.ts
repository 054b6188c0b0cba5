/**
 * Noninterference (I7): each probe runs alone twice (greedy, fixed seed, logprobs; three times with
 * --logprob-tolerance auto, which measures the solo-run jitter first). Solo runs that differ mean the
 * endpoint is not deterministic even alone: "cannot certify", not a leak. Then every probe runs again among a mixed
 * concurrent load of all tenants; its tokens and logprobs must equal the solo answer.
 */
import { type AnswerDifference, type AuditContext, compareAnswers, isBusy, type Probe } from './audit-context.js';
import { type CallRecord, completed } from './endpoint.js';
import { type ScenarioResult, settle } from './findings.js';

/** 'auto' tolerance: this many times the largest logprob difference seen between solo runs of one probe. */
export const AUTO_TOLERANCE_FACTOR = 4;

/**
 * Measures the probes' solo answers (used by this and later scenarios): two solo runs each, three with
 * --logprob-tolerance auto, which sets the tolerance from the largest logprob jitter between solo runs whose tokens
 * agree (a different token alone is never tolerated).
 */
export async function measureBaselines(ctx: AuditContext, result: ScenarioResult): Promise<void> {
  const auto = ctx.settings.logprobTolerance === 'auto';
  const runs = auto ? 3 : 2;
  let unstable = 0;
  let jitter = 0;
  const stable: { probe: Probe; first: CallRecord; rest: CallRecord[] }[] = [];
  for (const probe of ctx.probes) {
    const records: CallRecord[] = [];
    for (let i = 1; i <= runs; i++) {
      records.push(await ctx.call(ctx.probeSpec(probe, 'noninterference', `solo ${i}/${runs}`), result, probe.marker));
    }
    const failed = records.filter((r) => !completed(r));
    if (failed.length > 0) {
      result.notes.push(
        `probe ${probe.index} (${probe.tenant.name}) failed alone: status ${records.map((r) => r.status).join('/')} ` +
          `${failed[0]!.errorCode ?? ''}`.trimEnd(),
      );
      continue;
    }
    const [first, ...rest] = records as [CallRecord, ...CallRecord[]];
    const tokensDiffer = rest.map((r) => compareAnswers(first, r, Number.POSITIVE_INFINITY)).find((d) => d);
    if (tokensDiffer !== undefined) {
      unstable++;
      result.notes.push(unstableNote(probe, first, rest, tokensDiffer));
      continue;
    }
    for (const r of rest) jitter = Math.max(jitter, logprobJitter(first, r));
    stable.push({ probe, first, rest });
  }
  if (auto) {
    ctx.logprobTolerance = AUTO_TOLERANCE_FACTOR * jitter;
    result.notes.push(
      `--logprob-tolerance auto: largest solo-run logprob jitter ${jitter.toExponential(2)} over ` +
        `${stable.length} probes x ${runs} runs; tolerance set to ${ctx.logprobTolerance.toExponential(2)} ` +
        `(${AUTO_TOLERANCE_FACTOR}x)`,
    );
  }
  for (const { probe, first, rest } of stable) {
    const difference = rest.map((r) => compareAnswers(first, r, ctx.logprobTolerance)).find((d) => d);
    if (difference !== undefined) {
      unstable++;
      result.notes.push(unstableNote(probe, first, rest, difference));
      continue;
    }
    if (first.tokens.length === 0) result.notes.push(`probe ${probe.index}: no logprobs returned; comparing text only`);
    probe.baseline = first;
  }
  if (unstable > 0) result.notes.push(`${unstable} of ${ctx.probes.length} probes differ between solo runs`);
}

function unstableNote(probe: Probe, first: CallRecord, rest: CallRecord[], d: AnswerDifference): string {
  return (
    `probe ${probe.index} is not deterministic alone (calls ${[first, ...rest].map((r) => r.id).join(', ')}): ` +
    `${d.field} at position ${d.position}: ${JSON.stringify(d.expected)} then ${JSON.stringify(d.actual)}`
  );
}

/** The largest |logprob difference| of two answers with the same tokens. */
function logprobJitter(a: CallRecord, b: CallRecord): number {
  let max = 0;
  const n = Math.min(a.logprobs.length, b.logprobs.length);
  for (let i = 0; i < n; i++) {
    const d = Math.abs(a.logprobs[i]! - b.logprobs[i]!);
    if (Number.isFinite(d)) max = Math.max(max, d);
  }
  return max;
}

export function usableProbes(ctx: AuditContext): Probe[] {
  return ctx.probes.filter((p) => p.baseline !== undefined);
}

export async function runNoninterference(ctx: AuditContext, result: ScenarioResult): Promise<ScenarioResult> {
  ctx.progress.start('noninterference', ctx.probes.length * 5);
  await measureBaselines(ctx, result);
  const probes = usableProbes(ctx);
  if (probes.length === 0) {
    result.notes.push('no probe has a stable solo answer: nothing to compare under load');
    return settle(result, true);
  }
  type Outcome = { probe: Probe; record: Awaited<ReturnType<AuditContext['call']>> } | undefined;
  const tasks: (() => Promise<Outcome>)[] = probes.map((probe) => async () => ({
    probe,
    record: await ctx.call(ctx.probeSpec(probe, 'noninterference', 'under load', probe.index % 2 === 1), result),
  }));
  for (const { spec, marker } of ctx.loadSpecs('noninterference', probes.length * 2)) {
    tasks.push(async () => {
      await ctx.call(spec, result, marker);
      return undefined;
    });
  }
  const outcomes = await ctx.run(ctx.shuffle(tasks));
  let compared = 0;
  for (const outcome of outcomes) {
    if (outcome === undefined) continue;
    const { probe, record } = outcome;
    const baseline = probe.baseline!;
    if (isBusy(record) || record.timedOut) {
      result.notes.push(
        `probe ${probe.index} under load: status ${record.status} ${record.errorCode ?? ''}, not compared`,
      );
      continue;
    }
    if (!completed(record)) {
      // it answered alone: failing among other traffic (a 500, an error event) is interference, not an honest refusal
      result.findings.push({
        kind: 'noninterference_wrong_status',
        scenario: 'noninterference',
        summary:
          `probe ${probe.index} of ${probe.tenant.name} answered alone but failed under load: ` +
          `${record.status} ${record.errorCode ?? ''}`.trimEnd(),
        tenants: [probe.tenant.name],
        calls: [baseline.id, record.id],
        evidence: {
          field: 'status',
          alone: baseline.status,
          underLoad: record.status,
          errorCode: record.errorCode ?? null,
          soloCall: baseline.id,
          loadCall: record.id,
        },
      });
      continue;
    }
    compared++;
    const difference = compareAnswers(baseline, record, ctx.logprobTolerance);
    if (difference === undefined) continue;
    result.findings.push({
      kind: 'noninterference',
      scenario: 'noninterference',
      summary:
        `probe ${probe.index} of ${probe.tenant.name} answered differently under load: ${difference.field} at ` +
        `position ${difference.position}`,
      tenants: [probe.tenant.name],
      calls: [baseline.id, record.id],
      evidence: {
        field: difference.field,
        position: difference.position,
        alone: difference.expected,
        underLoad: difference.actual,
        soloCall: baseline.id,
        loadCall: record.id,
      },
    });
  }
  return settle(result, compared === 0 || probes.length < ctx.probes.length);
}
