/**
 * Interruptions: a tenant streams a marker-laden request and the client cancels it (AbortController) after a random
 * number of deltas; right then another tenant's probe runs. The probe must match its solo answer (the cancelled
 * request's pages must not bleed into it) and, like every response, is scanned for the cancelled request's marker.
 */
import { type AuditContext, compareAnswers, isBusy, type Probe } from './audit-context.js';
import { completed } from './endpoint.js';
import { newScenario, type ScenarioResult, settle } from './findings.js';
import { usableProbes } from './scenario-noninterference.js';

export async function runInterruptions(ctx: AuditContext, rounds: number): Promise<ScenarioResult> {
  const result = newScenario('interruptions');
  const probes = usableProbes(ctx);
  ctx.progress.start('interruptions', rounds * 2);
  let compared = 0;
  let cancelled = 0;
  const round = async (i: number) => {
    const victim = ctx.tenants[i % ctx.tenants.length]!;
    const { prompt, marker } = ctx.canaryPrompt(victim, 20 + ctx.rng.nextInt(40));
    const abortAfterDeltas = 1 + ctx.rng.nextInt(4);
    const cancelledCall = ctx.call(
      {
        tenant: victim,
        scenario: 'interruptions',
        label: `cancelled after ${abortAfterDeltas} deltas`,
        prompt,
        maxTokens: Math.max(ctx.settings.maxTokens * 4, 32),
        stream: true,
        greedy: false,
        abortAfterDeltas,
      },
      result,
      marker,
    );
    const others = probes.filter((p) => p.tenant.name !== victim.name);
    const probe: Probe | undefined = others[ctx.rng.nextInt(others.length)];
    const victimRecord = await cancelledCall;
    if (victimRecord.abortedByClient) cancelled++;
    if (probe === undefined) return;
    const record = await ctx.call(
      ctx.probeSpec(probe, 'interruptions', `after cancel of call ${victimRecord.id}`),
      result,
    );
    if (isBusy(record) || !completed(record)) {
      result.notes.push(`probe ${probe.index} after a cancel: status ${record.status}, not compared`);
      return;
    }
    compared++;
    const difference = compareAnswers(probe.baseline!, record, ctx.settings.logprobTolerance);
    if (difference === undefined) return;
    result.findings.push({
      kind: 'interruption_wrong_answer',
      scenario: 'interruptions',
      summary:
        `probe ${probe.index} of ${probe.tenant.name} right after ${victim.name}'s cancelled call ${victimRecord.id} ` +
        `differs from its solo answer: ${difference.field} at position ${difference.position}`,
      tenants: [probe.tenant.name, victim.name],
      calls: [record.id, victimRecord.id, probe.baseline!.id],
      evidence: { ...difference, cancelledCall: victimRecord.id, probeCall: record.id, soloCall: probe.baseline!.id },
    });
  };
  await ctx.run(Array.from({ length: rounds }, (_, i) => () => round(i)));
  result.notes.push(`${cancelled} of ${rounds} streams cancelled mid-way; ${compared} probes compared`);
  if (cancelled === 0) result.notes.push('no stream was cancelled mid-way (the endpoint may not stream)');
  return settle(result, compared === 0 || cancelled === 0);
}
