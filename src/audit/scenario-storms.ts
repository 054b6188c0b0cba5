/**
 * Storms: bursts of probes of every tenant fired at once, beyond any sane concurrency limit. Each answer must be an
 * honest refusal (429, 503) or exactly the probe's solo answer. Wrong content is a finding; so is any other status
 * (a 500 may be the endpoint catching an isolation fault: worth a look).
 */
import { type AuditContext, compareAnswers, isBusy } from './audit-context.js';
import { completed } from './endpoint.js';
import { type ScenarioResult, settle } from './findings.js';
import { usableProbes } from './scenario-noninterference.js';

export async function runStorms(ctx: AuditContext, result: ScenarioResult, bursts: number): Promise<ScenarioResult> {
  const probes = usableProbes(ctx);
  const size = Math.max(1, Math.min(ctx.settings.stormSize, Math.floor(ctx.budget.remaining / Math.max(1, bursts))));
  ctx.progress.start('storms', bursts * size);
  if (probes.length === 0) {
    result.notes.push('no probe has a stable solo answer: nothing to compare');
    return settle(result, true);
  }
  let correct = 0;
  let refused = 0;
  for (let burst = 0; burst < bursts; burst++) {
    const picks = Array.from({ length: size }, () => probes[ctx.rng.nextInt(probes.length)]!);
    const records = await ctx.run(
      picks.map(
        (probe, i) => () => ctx.call(ctx.probeSpec(probe, 'storms', `burst ${burst + 1}`, i % 3 === 0), result),
      ),
      size,
    );
    records.forEach((record, i) => {
      const probe = picks[i]!;
      if (isBusy(record)) {
        refused++;
        return;
      }
      if (!completed(record)) {
        result.findings.push({
          kind: 'storm_wrong_status',
          scenario: 'storms',
          summary:
            `probe ${probe.index} of ${probe.tenant.name} in a burst of ${size}: ${record.status} ${record.errorCode ?? ''}`.trimEnd(),
          tenants: [probe.tenant.name],
          calls: [record.id],
          evidence: {
            status: record.status,
            errorCode: record.errorCode ?? null,
            timedOut: record.timedOut,
            call: record.id,
          },
        });
        return;
      }
      const difference = compareAnswers(probe.baseline!, record, ctx.logprobTolerance);
      if (difference === undefined) {
        correct++;
        return;
      }
      result.findings.push({
        kind: 'storm_wrong_answer',
        scenario: 'storms',
        summary: `probe ${probe.index} of ${probe.tenant.name} in a burst of ${size} answered differently: ${difference.field} at position ${difference.position}`,
        tenants: [probe.tenant.name],
        calls: [probe.baseline!.id, record.id],
        evidence: { ...difference, soloCall: probe.baseline!.id, burstCall: record.id },
      });
    });
  }
  result.notes.push(`${bursts} bursts of ${size}: ${correct} correct, ${refused} refused (429/503)`);
  return settle(result, correct === 0);
}
