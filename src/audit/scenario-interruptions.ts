/**
 * Interruptions: a tenant streams a marker-laden request and the client cancels it (AbortController) after a random
 * number of deltas; right then a probe runs, of another tenant or (one round in two, at random) of the same one: a
 * cancelled request that keeps writing into freed pages damages whoever gets them next, and an owner check that
 * stops other tenants may still let the same tenant's next request through. The probe must be answered (200, or an
 * honest 429/503) and match its solo answer, and, like every response, is scanned for the cancelled request's marker.
 */
import { type AuditContext, compareAnswers, isBusy, type Probe } from './audit-context.js';
import { completed } from './endpoint.js';
import { type ScenarioResult, settle } from './findings.js';
import { usableProbes } from './scenario-noninterference.js';

export async function runInterruptions(
  ctx: AuditContext,
  result: ScenarioResult,
  rounds: number,
): Promise<ScenarioResult> {
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
    const sameTenant = ctx.rng.nextInt(2) === 0;
    const candidates = probes.filter((p) => (p.tenant.name === victim.name) === sameTenant);
    const probe: Probe | undefined = candidates[ctx.rng.nextInt(candidates.length)];
    const victimRecord = await cancelledCall;
    if (victimRecord.abortedByClient) cancelled++;
    if (probe === undefined) return;
    const record = await ctx.call(
      ctx.probeSpec(probe, 'interruptions', `after cancel of call ${victimRecord.id}`),
      result,
    );
    if (isBusy(record)) {
      result.notes.push(`probe ${probe.index} after a cancel: status ${record.status}, not compared`);
      return;
    }
    if (!completed(record)) {
      result.findings.push({
        kind: 'interruption_wrong_status',
        scenario: 'interruptions',
        summary:
          `probe ${probe.index} of ${probe.tenant.name} right after ${victim.name}'s cancelled call ${victimRecord.id}: ` +
          `${record.timedOut ? 'no answer in time' : `${record.status} ${record.errorCode ?? ''}`.trimEnd()}`,
        tenants: [probe.tenant.name, victim.name],
        calls: [record.id, victimRecord.id],
        evidence: {
          status: record.status,
          errorCode: record.errorCode ?? null,
          timedOut: record.timedOut,
          cancelledCall: victimRecord.id,
          probeCall: record.id,
        },
      });
      return;
    }
    compared++;
    const difference = compareAnswers(probe.baseline!, record, ctx.logprobTolerance);
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
