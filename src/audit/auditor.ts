/**
 * `kvfence audit`: runs the selected scenarios against an OpenAI-compatible endpoint, in an order that lets a leak
 * caused by one scenario show in a later one (the canary scan runs last, over every response of the audit):
 *   discover (/v1/models with every tenant's key) → prompt cache (timing: first, on a quiet endpoint) →
 *   noninterference (solo baselines, then under load) → canaries → context boundary → interruptions → storms →
 *   noisy neighbour (opt-in: it floods) → canary scan.
 * Interruptions and storms compare with noninterference's solo answers: selecting either runs noninterference too.
 */
import { KvfenceError } from '../util/errors.js';
import { AuditContext, type AuditSettings } from './audit-context.js';
import { BudgetExhausted, CallBudget } from './call-budget.js';
import { CanaryIndex } from './canary.js';
import { type ApiDialect, type CallRecord, Endpoint } from './endpoint.js';
import {
  DEFAULT_SCENARIOS,
  exitCodeOf,
  newScenario,
  SCENARIOS,
  type ScenarioName,
  type ScenarioResult,
  settle,
} from './findings.js';
import type { AuditTenant } from './keys-file.js';
import { Progress, type ProgressSink } from './progress.js';
import { runCanaryTraffic, scanForLeaks } from './scenario-canaries.js';
import { advertisedContext, runContextBoundary } from './scenario-context.js';
import { runInterruptions } from './scenario-interruptions.js';
import { runNoisyNeighbour } from './scenario-noisy-neighbour.js';
import { runNoninterference } from './scenario-noninterference.js';
import { runPromptCache } from './scenario-prompt-cache.js';
import { runStorms } from './scenario-storms.js';
import type { AuditTiming } from './timing-data.js';

export interface AuditOptions extends AuditSettings {
  target: string;
  tenants: readonly AuditTenant[];
  model: string | undefined;
  api: ApiDialect;
  requests: number;
  seed: number;
  timeoutMs: number;
  responseBytesMax: number;
  /** characters of another tenant's marker that make a leak */
  matchChars: number;
  /** scenarios to run (default: DEFAULT_SCENARIOS) */
  scenarios?: readonly ScenarioName[];
}

export interface AuditReport {
  target: string;
  model: string;
  api: ApiDialect;
  tenants: string[];
  context: { advertised: number | undefined; used: number | undefined };
  seed: number;
  startedAt: string;
  durationMs: number;
  requests: number;
  verdict: 'clean' | 'cannot_certify' | 'findings';
  exitCode: number;
  /** the --logprob-tolerance setting and the tolerance in force ('auto' measures it) */
  logprobTolerance: { setting: number | 'auto'; used: number };
  scenarios: ScenarioResult[];
  /** the timing scenarios' measurements (plotted by the HTML report) */
  timing: AuditTiming;
  /** the calls named by findings (text cut to 500 characters) */
  calls: Record<string, unknown>[];
}

export async function runAudit(options: AuditOptions, progressSink: ProgressSink): Promise<AuditReport> {
  const started = Date.now();
  const progress = new Progress(progressSink);
  const probeEndpoint = new Endpoint({ ...endpointOptions(options), model: options.model ?? '' });
  const { model, advertised } = await discover(probeEndpoint, options);
  const endpoint = new Endpoint({ ...endpointOptions(options), model });
  const canaries = new CanaryIndex(options.matchChars);
  const budget = new CallBudget(options.requests);
  const ctx = new AuditContext(endpoint, options.tenants, canaries, budget, progress, options, options.seed);
  const context = options.context ?? advertised;
  ctx.makeProbes();
  const tenantCount = options.tenants.length;
  const results = new Map<ScenarioName, ScenarioResult>();
  const step = async (name: ScenarioName, run: (result: ScenarioResult) => Promise<ScenarioResult>) => {
    // the scenario fills this one result, so what it found before the budget ran out is kept (findings win over
    // "cannot certify")
    const result = newScenario(name);
    try {
      await run(result);
    } catch (error) {
      if (!(error instanceof BudgetExhausted)) throw error;
      result.notes.push(`${error.message}: raise --requests`);
      settle(result, true);
    }
    const earlier = results.get(name);
    if (earlier !== undefined) {
      earlier.requests += result.requests;
      earlier.findings.push(...result.findings);
      earlier.notes.push(...result.notes);
    } else results.set(name, result);
    progress.end(result.verdict, result.findings.length);
  };
  const selected = selectedScenarios(options.scenarios ?? DEFAULT_SCENARIOS);
  const when = async (name: ScenarioName, run: (result: ScenarioResult) => Promise<ScenarioResult>) => {
    if (selected.has(name)) await step(name, run);
  };
  await when('prompt_cache', (r) => runPromptCache(ctx, r, context));
  await when('noninterference', (r) => runNoninterference(ctx, r));
  await when('canaries', (r) => runCanaryTraffic(ctx, r, 3));
  await when('context', (r) => runContextBoundary(ctx, r, context));
  await when('interruptions', (r) => runInterruptions(ctx, r, Math.max(2, tenantCount * 2)));
  await when('storms', (r) => runStorms(ctx, r, 2));
  await when('noisy_neighbour', (r) => runNoisyNeighbour(ctx, r, context));
  if (selected.has('canaries')) {
    const canary = results.get('canaries') ?? newScenario('canaries');
    progress.start('canary scan', 0);
    scanForLeaks(canaries, endpoint.records, canary);
    canary.notes.unshift(`${endpoint.records.length} responses scanned for ${canaries.markerCount} markers`);
    progress.end(canary.verdict, canary.findings.length);
  }
  progress.close();
  for (const name of SCENARIOS) {
    if (results.has(name)) continue;
    const skipped = newScenario(name);
    skipped.verdict = 'skipped';
    skipped.notes.push(name === 'noisy_neighbour' ? 'opt-in: --scenarios ...,noisy_neighbour' : 'not in --scenarios');
    results.set(name, skipped);
  }
  const scenarios = SCENARIOS.map((name) => results.get(name) ?? newScenario(name));
  const exitCode = exitCodeOf(scenarios);
  return {
    target: options.target,
    model,
    api: options.api,
    tenants: options.tenants.map((t) => t.name),
    context: { advertised, used: context },
    seed: options.seed,
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    requests: endpoint.callCount,
    verdict: exitCode === 0 ? 'clean' : scenarios.some((s) => s.verdict === 'finding') ? 'findings' : 'cannot_certify',
    exitCode,
    logprobTolerance: { setting: options.logprobTolerance, used: ctx.logprobTolerance },
    scenarios,
    timing: ctx.timing,
    calls: namedCalls(scenarios, endpoint.records),
  };
}

/** The selection, with noninterference added when interruptions or storms need its solo answers. */
function selectedScenarios(names: readonly ScenarioName[]): Set<ScenarioName> {
  const selected = new Set(names);
  if (selected.has('interruptions') || selected.has('storms')) selected.add('noninterference');
  return selected;
}

function endpointOptions(options: AuditOptions) {
  return {
    baseUrl: options.target,
    api: options.api,
    timeoutMs: options.timeoutMs,
    responseBytesMax: options.responseBytesMax,
    seed: options.seed,
  };
}

/** Every tenant's key must work; the model is --model or the first one listed. */
async function discover(
  endpoint: Endpoint,
  options: AuditOptions,
): Promise<{ model: string; advertised: number | undefined }> {
  let json: unknown;
  for (const tenant of options.tenants) {
    const r = await endpoint.models(tenant);
    if (r.status === 0) throw new KvfenceError('invalid_argument', `cannot reach ${options.target}: ${r.error}`);
    if (r.status === 401 || r.status === 403) {
      throw new KvfenceError('invalid_argument', `the endpoint refused the key of tenant ${tenant.name} (${r.status})`);
    }
    if (r.status === 200) json ??= r.json;
  }
  const ids = ((json as { data?: { id?: unknown }[] } | undefined)?.data ?? [])
    .map((m) => m.id)
    .filter((id): id is string => typeof id === 'string');
  const model = options.model ?? ids[0];
  if (model === undefined) {
    throw new KvfenceError('invalid_argument', `${options.target}/models lists no model: pass --model NAME`);
  }
  return { model, advertised: json === undefined ? undefined : advertisedContext(json, model) };
}

function namedCalls(scenarios: readonly ScenarioResult[], records: readonly CallRecord[]): Record<string, unknown>[] {
  const ids = new Set(scenarios.flatMap((s) => s.findings.flatMap((f) => f.calls)));
  return records
    .filter((r) => ids.has(r.id))
    .map((r) => ({
      id: r.id,
      tenant: r.tenant,
      scenario: r.scenario,
      label: r.label,
      status: r.status,
      stream: r.stream,
      maxTokens: r.maxTokens,
      promptExcerpt: r.prompt.slice(0, 500),
      text: r.text.slice(0, 500),
      deltas: r.deltas.length,
      elapsedMs: Math.round(r.elapsedMs * 10) / 10,
      firstTokenMs: r.firstTokenMs === undefined ? null : Math.round(r.firstTokenMs * 10) / 10,
      tokens: r.tokens.slice(0, 64),
      logprobs: r.logprobs.slice(0, 64),
      promptTokens: r.promptTokens ?? null,
      completionTokens: r.completionTokens ?? null,
      errorCode: r.errorCode ?? null,
      errorMessage: r.errorMessage?.slice(0, 500) ?? null,
    }));
}
