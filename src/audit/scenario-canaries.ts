/**
 * Canaries: every tenant sends marker-laden prompts (streamed and not, concurrently, asking the model to repeat them);
 * at the end of the audit every response of every scenario is scanned for other tenants' markers: the whole text (for
 * streams, the concatenated deltas: a marker split over deltas still shows), the error bodies, and every string of
 * every body or stream event (other choices, logprob tokens, fields the auditor does not ask for); each delta is named
 * as the place where a run starts.
 */
import type { AuditContext } from './audit-context.js';
import type { CanaryIndex } from './canary.js';
import { type CallRecord, completed } from './endpoint.js';
import { type Finding, type ScenarioResult, settle } from './findings.js';

export async function runCanaryTraffic(
  ctx: AuditContext,
  result: ScenarioResult,
  rounds: number,
): Promise<ScenarioResult> {
  const tasks: (() => Promise<void>)[] = [];
  const answered = new Set<string>();
  for (let round = 0; round < rounds; round++) {
    for (const tenant of ctx.tenants) {
      const { prompt, marker } = ctx.canaryPrompt(tenant, 6 + ctx.rng.nextInt(24));
      const spec = {
        tenant,
        scenario: 'canaries',
        label: `canary ${round + 1}`,
        prompt,
        maxTokens: ctx.settings.maxTokens,
        stream: (round + tenant.name.length) % 2 === 0,
        greedy: false,
      };
      tasks.push(async () => {
        if (completed(await ctx.call(spec, result, marker))) answered.add(tenant.name);
      });
    }
  }
  ctx.progress.start('canaries', tasks.length);
  await ctx.run(ctx.shuffle(tasks));
  // a tenant with no answer read nothing that could carry another's marker: a server that fails everything is not clean
  const unanswered = ctx.tenants.filter((t) => !answered.has(t.name)).map((t) => t.name);
  if (unanswered.length > 0) {
    result.notes.push(`no canary request of ${unanswered.join(', ')} completed`);
    settle(result, true);
  }
  return result;
}

/** Scans every call made so far; findings go into `result` (the canaries scenario). */
export function scanForLeaks(canaries: CanaryIndex, records: readonly CallRecord[], result: ScenarioResult): void {
  const seen = new Set<string>();
  for (const record of records) {
    const places: [string, string][] = [
      ['response text', record.text],
      ['error body', record.errorBody],
      ['error message', record.errorMessage ?? ''],
      ...[...record.fields].map(([path, text]): [string, string] => [`body field ${path || '(top)'}`, text]),
    ];
    for (const [place, text] of places) {
      for (const match of canaries.scan(text, record.tenant)) {
        const key = `${record.id}/${match.owner.marker}`;
        if (seen.has(key)) continue;
        seen.add(key);
        result.findings.push(leakFinding(record, place, match.offset, match.matched, match.owner));
      }
    }
  }
  settle(result, false);
}

function leakFinding(
  record: CallRecord,
  place: string,
  offset: number,
  matched: string,
  owner: { marker: string; tenant: string; callId: number },
): Finding {
  let where = place;
  if (place === 'response text' && record.deltas.length > 0) {
    let start = 0;
    for (let i = 0; i < record.deltas.length; i++) {
      const end = start + record.deltas[i]!.length;
      if (offset < end) {
        where = `streamed delta ${i + 1} of ${record.deltas.length}`;
        break;
      }
      start = end;
    }
  }
  return {
    kind: 'canary_leak',
    scenario: 'canaries',
    summary:
      `tenant ${record.tenant} received ${matched.length} characters of a marker of tenant ${owner.tenant} ` +
      `(call ${record.id}, ${record.scenario}: ${record.label})`,
    tenants: [record.tenant, owner.tenant],
    calls: owner.callId === 0 ? [record.id] : [record.id, owner.callId],
    evidence: {
      leaked: matched,
      marker: owner.marker,
      where,
      offset,
      readerCall: record.id,
      readerScenario: record.scenario,
      ownerCall: owner.callId,
      status: record.status,
    },
  };
}
