/**
 * Noninterference (I7): each probe runs alone twice (greedy, fixed seed, logprobs). Two solo runs that differ mean the
 * endpoint is not deterministic even alone: "cannot certify", not a leak. Then every probe runs again among a mixed
 * concurrent load of all tenants; its tokens and logprobs must equal the solo answer.
 */
import { type AuditContext, compareAnswers, isBusy, type Probe } from './audit-context.js';
import { completed } from './endpoint.js';
import { newScenario, type ScenarioResult, settle } from './findings.js';

/** Measures the probes' solo answers (used by this and later scenarios). */
export async function measureBaselines(ctx: AuditContext, result: ScenarioResult): Promise<void> {
  let unstable = 0;
  for (const probe of ctx.probes) {
    const first = await ctx.call(ctx.probeSpec(probe, 'noninterference', 'solo 1/2'), result, probe.marker);
    const second = await ctx.call(ctx.probeSpec(probe, 'noninterference', 'solo 2/2'), result, probe.marker);
    if (!completed(first) || !completed(second)) {
      result.notes.push(
        `probe ${probe.index} (${probe.tenant.name}) failed alone: status ${first.status}/${second.status} ` +
          `${first.errorCode ?? second.errorCode ?? ''}`.trimEnd(),
      );
      continue;
    }
    const difference = compareAnswers(first, second, ctx.settings.logprobTolerance);
    if (difference !== undefined) {
      unstable++;
      result.notes.push(
        `probe ${probe.index} is not deterministic alone (calls ${first.id}, ${second.id}): ${difference.field} at ` +
          `position ${difference.position}: ${JSON.stringify(difference.expected)} then ${JSON.stringify(difference.actual)}`,
      );
      continue;
    }
    if (first.tokens.length === 0) result.notes.push(`probe ${probe.index}: no logprobs returned; comparing text only`);
    probe.baseline = first;
  }
  if (unstable > 0) result.notes.push(`${unstable} of ${ctx.probes.length} probes differ between two solo runs`);
}

export function usableProbes(ctx: AuditContext): Probe[] {
  return ctx.probes.filter((p) => p.baseline !== undefined);
}

export async function runNoninterference(ctx: AuditContext): Promise<ScenarioResult> {
  const result = newScenario('noninterference');
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
    if (isBusy(record) || !completed(record)) {
      result.notes.push(
        `probe ${probe.index} under load: status ${record.status} ${record.errorCode ?? ''}, not compared`,
      );
      continue;
    }
    compared++;
    const difference = compareAnswers(baseline, record, ctx.settings.logprobTolerance);
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
