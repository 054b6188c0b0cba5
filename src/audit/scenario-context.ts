/**
 * The context boundary (I1, I2; the incident's shape). Reads the advertised context C from /v1/models (or --context),
 * finds a prompt of a known token count P a little under C (usage.prompt_tokens of small probes gives tokens per
 * filler word; probes then home in), and asks for P + max_tokens = C - 1 and C (must succeed: the advertised context
 * is served), C + 1 (must be refused with a 4xx), and prompts that alone exceed C, just and far (must be refused with
 * a 4xx). A 200 for an oversize request is the incident: a substitute answer instead of an error.
 */
import type { AuditContext } from './audit-context.js';
import { isBusy } from './audit-context.js';
import type { CallRecord, CallSpec } from './endpoint.js';
import { type FindingKind, type ScenarioResult, settle } from './findings.js';

const HOMING_PROBES_MAX = 8;
const FAR_EXTRA_TOKENS_MAX = 32_768;

/** The context length a /v1/models answer advertises for `model` (field names differ between servers). */
export function advertisedContext(json: unknown, model: string): number | undefined {
  const root = json as { data?: unknown } | undefined;
  const entries = Array.isArray(root?.data) ? (root.data as unknown[]) : [json];
  const entry = (entries.find((e) => (e as { id?: unknown } | null)?.id === model) ?? entries[0]) as
    | Record<string, unknown>
    | undefined;
  if (typeof entry !== 'object' || entry === null) return undefined;
  const meta = (typeof entry['meta'] === 'object' && entry['meta'] !== null ? entry['meta'] : {}) as Record<
    string,
    unknown
  >;
  for (const value of [
    entry['max_model_len'],
    entry['context_length'],
    entry['context_window'],
    entry['max_context_length'],
    entry['n_ctx'],
    meta['n_ctx'],
    meta['n_ctx_train'],
  ]) {
    if (typeof value === 'number' && Number.isInteger(value) && value > 0) return value;
  }
  return undefined;
}

interface Measured {
  words: number;
  promptTokens: number;
}

export async function runContextBoundary(
  ctx: AuditContext,
  result: ScenarioResult,
  context: number | undefined,
): Promise<ScenarioResult> {
  ctx.progress.start('context', HOMING_PROBES_MAX + 6);
  if (context === undefined) {
    result.notes.push('no context length advertised by /v1/models and no --context given');
    return settle(result, true);
  }
  const tenant = ctx.tenants[0]!;
  const { prompt: head, marker } = ctx.canaryPrompt(tenant, 4);
  const promptOf = (words: number) => `${head} ${'river '.repeat(words)}`.trimEnd();
  const spec = (label: string, words: number, maxTokens: number): CallSpec => ({
    tenant,
    scenario: 'context',
    label,
    prompt: promptOf(words),
    maxTokens,
    stream: false,
    greedy: true,
  });
  const measure = async (words: number): Promise<{ tokens: number | undefined; record: CallRecord }> => {
    const record = await ctx.call(spec(`measure ${words} words`, words, 1), result, marker);
    let tokens = record.status === 200 ? record.promptTokens : undefined;
    if (tokens === undefined && record.status === 200 && ctx.endpoint.options.api === 'completions') {
      tokens = await ctx.endpoint.tokenize(tenant, promptOf(words));
    }
    return { tokens, record };
  };

  const a = await measure(8);
  // The second probe is 32 words longer, or shorter when that already exceeds a small context (a 4xx).
  let span = 32;
  let b = await measure(8 + span);
  while (a.tokens !== undefined && b.tokens === undefined && isClientError(b.record) && span > 8) {
    span /= 2;
    b = await measure(8 + span);
  }
  if (a.tokens === undefined || b.tokens === undefined) {
    result.notes.push(
      `cannot count prompt tokens: small probes answered ${a.record.status}/${b.record.status} without ` +
        'usage.prompt_tokens, and no /tokenize endpoint',
    );
    return settle(result, true);
  }
  const perWord = (b.tokens - a.tokens) / span;
  if (!(perWord > 0)) {
    result.notes.push(`the prompt token count does not grow with the prompt (${a.tokens}, ${b.tokens})`);
    return settle(result, true);
  }
  const base = a.tokens - perWord * 8;
  const near = await homeIn(ctx, context - 2, base, perWord, measure);
  if (near === undefined) {
    result.notes.push(`could not find a prompt of about ${context - 2} tokens within ${HOMING_PROBES_MAX} probes`);
    return settle(result, true);
  }
  result.notes.push(`context ${context}; filler prompt of ${near.promptTokens} tokens (${perWord.toFixed(2)}/word)`);
  const P = near.promptTokens;
  const overWords = near.words + Math.ceil((context + 1 - P) / perWord) + 1;
  const farWords = near.words + Math.ceil((Math.min(context, FAR_EXTRA_TOKENS_MAX) + 2) / perWord);
  const cases: { label: string; words: number; maxTokens: number; total: number; fits: boolean }[] = [
    { label: 'just below', words: near.words, maxTokens: context - 1 - P, total: context - 1, fits: true },
    { label: 'at', words: near.words, maxTokens: context - P, total: context, fits: true },
    {
      label: 'just above (max_tokens)',
      words: near.words,
      maxTokens: context + 1 - P,
      total: context + 1,
      fits: false,
    },
    {
      label: 'prompt just above',
      words: overWords,
      maxTokens: 1,
      total: Math.round(base + perWord * overWords) + 1,
      fits: false,
    },
    {
      label: 'prompt far above',
      words: farWords,
      maxTokens: 1,
      total: Math.round(base + perWord * farWords) + 1,
      fits: false,
    },
  ];
  let inconclusive = false;
  for (const c of cases) {
    const record = await ctx.call(spec(c.label, c.words, c.maxTokens), result, marker);
    inconclusive = judge(result, c, record, context) || inconclusive;
  }
  return settle(result, inconclusive);
}

async function homeIn(
  ctx: AuditContext,
  target: number,
  base: number,
  perWord: number,
  measure: (words: number) => Promise<{ tokens: number | undefined; record: CallRecord }>,
): Promise<Measured | undefined> {
  let words = Math.max(1, Math.floor((target - base) / perWord));
  let best: Measured | undefined;
  for (let i = 0; i < HOMING_PROBES_MAX && ctx.budget.remaining > 6; i++) {
    const { tokens, record } = await measure(words);
    if (tokens === undefined) {
      if (isBusy(record)) continue;
      words = Math.max(1, words - Math.ceil(2 / perWord) - 1); // over the limit, or refused: step down
      continue;
    }
    if (tokens <= target && (best === undefined || tokens > best.promptTokens)) best = { words, promptTokens: tokens };
    if (tokens <= target && target - tokens <= Math.ceil(perWord) + 1) return { words, promptTokens: tokens };
    const step = Math.trunc((target - tokens) / perWord);
    words = Math.max(1, words + (step === 0 ? (tokens > target ? -1 : 1) : step));
  }
  return best !== undefined && target - best.promptTokens <= 64 ? best : undefined;
}

function isClientError(record: CallRecord): boolean {
  return record.status >= 400 && record.status < 500 && !isBusy(record);
}

/** Judges one boundary request; returns true when it was inconclusive (busy). */
function judge(
  result: ScenarioResult,
  c: { label: string; maxTokens: number; total: number; fits: boolean },
  record: CallRecord,
  context: number,
): boolean {
  if (isBusy(record) || record.status === 0) {
    result.notes.push(`${c.label}: status ${record.status} ${record.errorCode ?? ''}: inconclusive`.trimEnd());
    return true;
  }
  const evidence = {
    case: c.label,
    status: record.status,
    context,
    requestedTokens: c.total,
    maxTokens: c.maxTokens,
    promptTokensReported: record.promptTokens ?? null,
    completionTokensReported: record.completionTokens ?? null,
    errorCode: record.errorCode ?? null,
    answerExcerpt: record.text.slice(0, 80),
    call: record.id,
  };
  const finding = (kind: FindingKind, summary: string) =>
    result.findings.push({
      kind,
      scenario: 'context',
      summary,
      tenants: [record.tenant],
      calls: [record.id],
      evidence,
    });
  // a 200 whose body or stream carries an error object is a refusal, not an answer
  const servedOk = record.status === 200 && record.errorCode === undefined;
  if (c.fits && !servedOk) {
    finding(
      'context_advertised_refused',
      `${c.label} the advertised context (${c.total} of ${context}): ${record.status} ${record.errorCode ?? ''}`.trimEnd(),
    );
  } else if (!c.fits && servedOk) {
    finding(
      'context_oversize_served',
      `${c.label} the context (${c.total} > ${context} tokens) answered 200 with ` +
        `${record.completionTokens ?? record.tokens.length} tokens instead of a 4xx`,
    );
  } else if (!c.fits && (record.status < 400 || record.status >= 500)) {
    finding(
      'context_wrong_status',
      `${c.label} the context (${c.total} > ${context}): ${record.status} ${record.errorCode ?? ''}, not a 4xx`,
    );
  } else if (!c.fits) {
    result.notes.push(`${c.label}: ${record.status} ${record.errorCode ?? ''}`.trimEnd());
  }
  return false;
}
