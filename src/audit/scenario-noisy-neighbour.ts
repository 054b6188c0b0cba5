/**
 * Noisy neighbour (opt-in: it loads the target on purpose). Availability isolation: can one tenant's traffic stall
 * another's? The first tenant (victim) sends short streamed probes one after another, twice:
 *   baseline  while the second tenant (flooder) keeps B = concurrency/4 long-prompt streams going, read (what a
 *             per-tenant quota should allow it);
 *   flood     while the flooder keeps 16·B streams going (past its quota: refusals are retried after RETRY_MS),
 *             rotating long prompts at the default temperature with logprobs, long answers, and streams it opens
 *             and never reads.
 * The flood is the same kind of work as the baseline, only more of it and worse behaved, so a server that isolates
 * tenants (per-tenant limits, fair admission) answers the victim about as fast under both. Finding
 * `noisy_neighbour_slowdown` when the victim's median latency under the flood exceeds BOUND_FACTOR × the baseline
 * median + BOUND_SLACK_MS, or when a probe fails under the flood that did not under the baseline.
 * Bounded: PROBES probes a phase, at most FLOOD_REQUESTS_MAX flooder requests a phase, each phase at most PHASE_MS_MAX,
 * unread streams cancelled at the end of their phase.
 */
import { setMaxListeners } from 'node:events';
import type { AuditContext } from './audit-context.js';
import { BudgetExhausted } from './call-budget.js';
import { type CallRecord, completed } from './endpoint.js';
import { type ScenarioResult, settle } from './findings.js';
import type { AuditTenant } from './keys-file.js';
import { median } from './ks-test.js';
import { measurePromptSize } from './prompt-size.js';
import type { NoisyNeighbourTiming } from './timing-data.js';

export const BOUND_FACTOR = 3;
export const BOUND_SLACK_MS = 100;
const PROBES = 6;
const FLOOD_FACTOR = 16;
const FLOOD_REQUESTS_MAX = 600;
const PHASE_MS_MAX = 60_000;
const RETRY_MS = 200;
const UNREAD_MS = 5_000;
/** the victim's first probe starts once the load has had this long to build up */
const RAMP_MS = 200;
const LONG_PROMPT_TOKENS_MAX = 8192;

interface Phase {
  latencies: number[];
  failed: CallRecord[];
  load: CallRecord[];
}

export async function runNoisyNeighbour(
  ctx: AuditContext,
  result: ScenarioResult,
  context: number | undefined,
): Promise<ScenarioResult> {
  const victim = ctx.tenants[0]!;
  const flooder = ctx.tenants[1]!;
  const baselineStreams = Math.max(1, Math.floor(ctx.settings.concurrency / 4));
  const floodStreams = baselineStreams * FLOOD_FACTOR;
  ctx.progress.start('noisy_neighbour', 2 + PROBES * 2 + baselineStreams * 4 + floodStreams * 4);
  const size = await measurePromptSize(ctx, result, flooder);
  if (size === undefined) return settle(result, true);
  // long prompts: 3/4 of the context (of 1024 tokens when unknown), leaving room for the long answers
  const longTokens = Math.min(LONG_PROMPT_TOKENS_MAX, Math.floor((context ?? 1024) * 0.75));
  const longWords = Math.max(8, Math.floor((longTokens - size.base) / size.perWord));
  const probePrompt = ctx.words(8);
  const longAnswer = Math.max(1, Math.min(ctx.settings.maxTokens * 8, (context ?? 1024) - longTokens - 8));
  const benign = (i: number, stop: AbortSignal) => ({
    tenant: flooder,
    scenario: 'noisy_neighbour',
    label: `benign load ${i}`,
    prompt: ctx.words(longWords),
    maxTokens: ctx.settings.maxTokens,
    stream: true,
    greedy: true,
    logprobs: false,
    stop,
  });
  const hostile = (i: number, stop: AbortSignal) => {
    const base = { ...benign(i, stop), label: `flood ${i}`, greedy: false, logprobs: true };
    if (i % 3 === 1) return { ...base, label: `flood ${i} (unread)`, unreadForMs: UNREAD_MS, stop };
    if (i % 3 === 2) return { ...base, label: `flood ${i} (long answer)`, maxTokens: longAnswer };
    return base;
  };
  let baseline: Phase;
  let flood: Phase;
  try {
    baseline = await phase(ctx, result, victim, probePrompt, baselineStreams, benign);
    flood = await phase(ctx, result, victim, probePrompt, floodStreams, hostile);
  } catch (error) {
    if (!(error instanceof BudgetExhausted)) throw error;
    result.notes.push(`${error.message}: raise --requests`);
    return settle(result, true);
  }
  const statuses: Record<string, number> = {};
  for (const r of flood.load) statuses[String(r.status)] = (statuses[String(r.status)] ?? 0) + 1;
  if (baseline.latencies.length < PROBES / 2) {
    result.notes.push(`only ${baseline.latencies.length} of the baseline's probes were answered: no baseline`);
    return settle(result, true);
  }
  const base = median(baseline.latencies);
  const under = flood.latencies.length > 0 ? median(flood.latencies) : Number.POSITIVE_INFINITY;
  const boundMs = BOUND_FACTOR * base + BOUND_SLACK_MS;
  const timing: NoisyNeighbourTiming = {
    victim: victim.name,
    flooder: flooder.name,
    baselineMs: baseline.latencies,
    floodMs: flood.latencies,
    boundMs,
    ratio: under / base,
    baselineStreams,
    floodStreams,
    floodRequests: flood.load.length,
    floodStatuses: statuses,
  };
  ctx.timing.noisyNeighbour = timing;
  result.notes.unshift(
    `${victim.name}'s probe latency: median ${base.toFixed(0)} ms beside ${baselineStreams} benign streams, ` +
      `${Number.isFinite(under) ? under.toFixed(0) : 'none answered'} ms beside ${flooder.name}'s flood of ` +
      `${floodStreams} (${flood.load.length} requests, statuses ${JSON.stringify(statuses)}); ` +
      `bound ${BOUND_FACTOR}x + ${BOUND_SLACK_MS} ms = ${boundMs.toFixed(0)} ms`,
  );
  const newFailures = flood.failed.length > baseline.failed.length;
  if (under > boundMs || newFailures) {
    result.findings.push({
      kind: 'noisy_neighbour_slowdown',
      scenario: 'noisy_neighbour',
      summary:
        `${flooder.name}'s flood slowed ${victim.name}'s short requests ${timing.ratio.toFixed(1)}x ` +
        `(median ${Number.isFinite(under) ? under.toFixed(0) : '-'} ms vs ${base.toFixed(0)} ms; bound ${boundMs.toFixed(0)} ms)` +
        (newFailures ? `; ${flood.failed.length} of its probes failed` : ''),
      tenants: [victim.name, flooder.name],
      calls: [...flood.failed.map((r) => r.id)].slice(0, 8),
      evidence: {
        victim: victim.name,
        flooder: flooder.name,
        baselineMedianMs: Math.round(base),
        floodMedianMs: Number.isFinite(under) ? Math.round(under) : null,
        ratio: Number.isFinite(timing.ratio) ? Math.round(timing.ratio * 100) / 100 : null,
        boundMs: Math.round(boundMs),
        probesFailedUnderFlood: flood.failed.length,
        floodStreams,
        floodRequests: flood.load.length,
      },
    });
  }
  return settle(result, flood.latencies.length === 0 && !newFailures);
}

/**
 * Keeps `streams` loops of the flooder's requests going while the victim sends PROBES short probes one after another;
 * stops the load (cancelling unread streams) when the probes are done, the phase's time or request cap is reached.
 */
async function phase(
  ctx: AuditContext,
  result: ScenarioResult,
  victim: AuditTenant,
  probePrompt: string,
  streams: number,
  loadSpec: (i: number, stop: AbortSignal) => Parameters<AuditContext['call']>[0],
): Promise<Phase> {
  const stop = new AbortController();
  // a load request in flight listens once, and once more while it leaves its stream unread; the probes' wait once
  setMaxListeners(2 * streams + 2, stop.signal);
  const deadline = Date.now() + PHASE_MS_MAX;
  const load: CallRecord[] = [];
  let sent = 0;
  const loop = async () => {
    while (!stop.signal.aborted && sent < FLOOD_REQUESTS_MAX && Date.now() < deadline) {
      const record = await ctx.call(loadSpec(sent++, stop.signal), result);
      load.push(record);
      if (!completed(record) && !record.abortedByClient) await sleep(RETRY_MS, stop.signal);
    }
  };
  const loops = Array.from({ length: streams }, loop);
  const latencies: number[] = [];
  const failed: CallRecord[] = [];
  try {
    await sleep(RAMP_MS, stop.signal);
    for (let i = 0; i < PROBES && Date.now() < deadline; i++) {
      const record = await ctx.call(
        {
          tenant: victim,
          scenario: 'noisy_neighbour',
          label: `probe ${i + 1}`,
          prompt: probePrompt,
          maxTokens: ctx.settings.maxTokens,
          stream: true,
          greedy: true,
        },
        result,
      );
      if (completed(record)) latencies.push(record.elapsedMs);
      else failed.push(record);
    }
  } finally {
    stop.abort();
    await Promise.allSettled(loops);
  }
  const loopError = (await Promise.allSettled(loops)).find((r) => r.status === 'rejected');
  if (loopError !== undefined) throw (loopError as PromiseRejectedResult).reason;
  return { latencies, failed, load };
}

function sleep(ms: number, stop: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (stop.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      stop.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    stop.addEventListener('abort', done);
  });
}
