/**
 * Continuous batching: which tokens each running sequence feeds this step (admission.ts picks who runs). A sequence
 * is admitted only when its whole need (prompt + maxTokens, in pages) can be reserved, so a running sequence never runs
 * out of pages: no overcommit, no eviction, no truncation (admission may pause a sequence, its pages held: admission.ts).
 *
 * Each step: every decoding sequence feeds its last token (1 each), then prefilling sequences take prompt chunks of
 * at most prefillChunkTokens from what is left of the step token budget — while any sequence decodes, of at most one
 * chunk in all, so a decoder's next token never waits behind several prompts. With a pace (prefill-pace.ts) the
 * step's prompts are sized to a step time instead, and each tenant gets an equal share of that time, its tokens priced
 * by their position (a token deep into a long prompt costs several at a prompt's start); without one, an equal share of
 * the tokens. Oldest first inside a tenant.
 */
import type { ForwardInput } from '../compute/forward.js';
import type { PageTable } from '../kv/page-table.js';
import { assert } from '../util/assert.js';
import type { EngineConfig } from './engine-config.js';
import type { Sequence } from './sequence.js';

export interface PlannedInput {
  seq: Sequence;
  input: ForwardInput;
}

/** What a step's prompts may cost in all, and what a prompt's next tokens cost (prefill-pace.ts learns both). */
export interface PromptCost {
  /** the most the step's prompt tokens may cost together, in cost()'s unit */
  budget: number;
  /** what `n` prompt tokens from position `start` cost: grows with n */
  cost(start: number, n: number): number;
}

/** Prices the next step's prompt tokens (prefill-pace.ts learns them from step times). */
export interface StepPace {
  promptCost(decoding: boolean): PromptCost;
}

/** Without a pace: every prompt token costs one, and only the step's token bounds apply. */
export const TOKEN_COST: PromptCost = { budget: Number.POSITIVE_INFINITY, cost: (_start, n) => n };

/** This step's forward inputs: decode tokens first, then prefill chunks under the step token budget. */
export function planStep(config: EngineConfig, running: readonly Sequence[], pace?: StepPace): PlannedInput[] {
  const planned: PlannedInput[] = [];
  let budget = config.stepTokenBudget;
  for (const seq of running) {
    if (seq.state !== 'decoding') continue;
    assert(seq.table !== undefined && seq.nextInput !== undefined, 'a decoding sequence has pages and a token to feed');
    planned.push({ seq, input: { table: seq.table, tokens: [seq.nextInput], logits: 'last' } });
    budget--;
  }
  assert(budget >= 0, 'the step budget covers every decoding sequence (validated at startup)');
  // While anyone decodes, prompts get one chunk a step in all, and what the pace allows: a step's time is every
  // decoder's inter-token time, so other tenants' long prompts cannot stretch it past that much prefill (I11)
  const decoding = planned.length > 0;
  const tokensMax = decoding ? Math.min(budget, config.prefillChunkTokens) : budget;
  const cost = pace?.promptCost(decoding) ?? TOKEN_COST;
  const prompts = running.filter((seq) => seq.state === 'prefilling');
  planned.push(
    ...promptChunks(prompts, config.prefillChunkTokens, tokensMax, cost, (seq) => {
      assert(seq.table !== undefined, 'a prefilling sequence has pages');
      return { tenant: seq.tenant, table: seq.table, tokens: seq.request.promptTokens };
    }),
  );
  return planned;
}

/** A prompt in progress: its tenant, the table its KV goes to (`writtenTokens` of it written so far), all its tokens. */
export interface PromptInProgress {
  tenant: string;
  table: PageTable;
  tokens: readonly number[];
}

/**
 * This step's chunk of each prompt (`of` says what each item's prompt is; items that get no tokens this step are left
 * out): at most `chunk` tokens each, `tokensMax` in all and what `cost` allows, shared among tenants by `fairShares`.
 * Both engines plan their prompts through it, the colocated/decode one and prefill's.
 */
export function promptChunks<S>(
  items: readonly S[],
  chunk: number,
  tokensMax: number,
  cost: PromptCost,
  of: (item: S) => PromptInProgress,
): { seq: S; input: ForwardInput }[] {
  const prompts = items.map(of);
  const wants = prompts.map((p) => ({
    tenant: p.tenant,
    start: p.table.writtenTokens,
    tokens: Math.min(chunk, p.tokens.length - p.table.writtenTokens),
  }));
  const grants = fairShares(wants, tokensMax, cost);
  const planned: { seq: S; input: ForwardInput }[] = [];
  prompts.forEach(({ table, tokens }, i) => {
    const count = grants[i]!;
    if (count === 0) return;
    const start = table.writtenTokens;
    const last = start + count === tokens.length;
    planned.push({
      seq: items[i]!,
      input: { table, tokens: tokens.slice(start, start + count), logits: last ? 'last' : 'none' },
    });
  });
  return planned;
}

/** A prompt that wants `tokens` of a step from position `start` (at most a chunk and what is left of it). */
interface PromptWant {
  tenant: string;
  start: number;
  tokens: number;
}

/** Bisection steps of the fair level: a share found to within 2⁻⁴⁸ of the largest tenant's whole want */
const LEVEL_STEPS = 48;

/**
 * Prompt tokens per prompt: every tenant may spend the same (what one cannot use goes to the others), so a tenant with
 * many or long prompts cannot slow another's first token more than an equal share of the step would (I11); inside a
 * tenant, in the given order (oldest first). The share is the largest level at which every tenant's tokens, each taking
 * what the level buys, stay within the budget and `tokensMax`; what that leaves buys one more token each, oldest
 * prompt's tenant first. If no token fits the budget, the oldest prompt gets one: prompts advance every step that
 * has room for a token.
 */
function fairShares(wants: readonly PromptWant[], tokensMax: number, { budget, cost }: PromptCost): number[] {
  if (wants.length === 0) return [];
  const tenants = new Map<string, number[]>(); // each tenant's prompts, by index; the oldest prompt's tenant first
  wants.forEach((w, i) => {
    assert(w.tokens > 0, 'a prompt in the plan has tokens left');
    const mine = tenants.get(w.tenant) ?? tenants.set(w.tenant, []).get(w.tenant)!;
    mine.push(i);
  });
  // what every tenant takes when each may spend `level`: its prompts in order, each as far as what is left buys
  const fill = (level: number) => {
    const counts = wants.map(() => 0);
    let spent = 0;
    let tokens = 0;
    for (const mine of tenants.values()) {
      let left = level;
      for (const i of mine) {
        const { start, tokens: want } = wants[i]!;
        const n = mostWithin(want, left, (k) => cost(start, k));
        const paid = cost(start, n);
        counts[i] = n;
        left -= paid;
        spent += paid;
        tokens += n;
        if (n < want) break;
      }
    }
    return { counts, spent, tokens };
  };
  const fits = (f: ReturnType<typeof fill>) => f.spent <= budget && f.tokens <= tokensMax;
  const whole = Math.max(
    ...[...tenants.values()].map((mine) => mine.reduce((sum, i) => sum + cost(wants[i]!.start, wants[i]!.tokens), 0)),
  );
  let best = fill(whole);
  if (fits(best)) return best.counts;
  let [low, high] = [0, whole];
  best = fill(low);
  for (let step = 0; step < LEVEL_STEPS; step++) {
    const mid = (low + high) / 2;
    const f = fill(mid);
    if (fits(f)) [low, best] = [mid, f];
    else high = mid;
  }
  const { counts } = best;
  let { spent, tokens } = best;
  for (const mine of tenants.values()) {
    const i = mine.find((j) => counts[j]! < wants[j]!.tokens);
    if (i === undefined) continue;
    const { start } = wants[i]!;
    const more = cost(start, counts[i]! + 1) - cost(start, counts[i]!);
    if (spent + more > budget || tokens + 1 > tokensMax) continue;
    counts[i]!++;
    spent += more;
    tokens++;
  }
  if (tokens === 0 && tokensMax > 0) counts[0] = 1;
  return counts;
}

/** The most of `want` tokens whose price (`price(k)`, growing with k) stays within `left`. */
function mostWithin(want: number, left: number, price: (k: number) => number): number {
  if (price(want) <= left) return want;
  let [low, high] = [0, want]; // price(low) ≤ left < price(high), or low = 0
  while (high - low > 1) {
    const mid = (low + high) >> 1;
    if (price(mid) <= left) low = mid;
    else high = mid;
  }
  return low;
}
