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

/**
 * How far ahead each tenant's prompts are of those of the tenant furthest behind, in what they spent over the steps
 * they waited in (the pace's unit; fairShares). One per engine, carried from step to step.
 */
export type Ahead = Map<string, number>;

/** Without a pace: every prompt token costs one, and only the step's token bounds apply. */
export const TOKEN_COST: PromptCost = { budget: Number.POSITIVE_INFINITY, cost: (_start, n) => n };

/** This step's forward inputs: decode tokens first, then prefill chunks under the step token budget. */
export function planStep(
  config: EngineConfig,
  running: readonly Sequence[],
  pace?: StepPace,
  ahead: Ahead = new Map(),
): PlannedInput[] {
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
    ...promptChunks(prompts, config.prefillChunkTokens, tokensMax, cost, ahead, (seq) => {
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
 * out): at most `chunk` tokens each, `tokensMax` in all and what `cost` allows, shared among tenants by `fairShares`
 * (`ahead`: how far ahead each tenant is from earlier steps, updated).
 * Both engines plan their prompts through it, the colocated/decode one and prefill's.
 */
export function promptChunks<S>(
  items: readonly S[],
  chunk: number,
  tokensMax: number,
  cost: PromptCost,
  ahead: Ahead,
  of: (item: S) => PromptInProgress,
): { seq: S; input: ForwardInput }[] {
  const prompts = items.map(of);
  const wants = prompts.map((p) => ({
    tenant: p.tenant,
    start: p.table.writtenTokens,
    tokens: Math.min(chunk, p.tokens.length - p.table.writtenTokens),
  }));
  const grants = fairShares(wants, tokensMax, cost, ahead);
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

/** Bisection steps of the fair level at most: it stops sooner, once no tenant could buy two more tokens between bounds */
const LEVEL_STEPS = 48;
/** Prices are sums of floating-point products: a level buys what costs at most this much (relative) more */
const LEVEL_SLACK = 1e-12;

/**
 * Prompt tokens per prompt, by water-filling: every tenant's spending, added to how far `ahead` it already is, rises to
 * one common level, the largest at which the step stays within the budget and `tokensMax` (what one cannot use goes to
 * the others); inside a tenant, its prompts in the given order (oldest first). So a tenant with many or long prompts
 * cannot slow another's first token more than an equal share of the step would (I11). What the level leaves buys more
 * tokens, one a tenant a pass, the tenant least ahead first, for any tenant whose next token still fits. Then each
 * tenant still wanting is that much further ahead: a prompt deep into a long context, whose next token costs more than
 * a share, falls behind and is served first until it has caught up, an extra token every few steps. A tenant with
 * nothing left wanting leaves `ahead`, and one that comes back starts level with the one furthest behind; no one is
 * more than a step's budget ahead. If no token fits the budget, the oldest prompt gets one: prompts advance every step
 * that has room for a token.
 */
function fairShares(wants: readonly PromptWant[], tokensMax: number, price: PromptCost, ahead: Ahead): number[] {
  const { budget, cost } = price;
  const all = wants.map((w) => w.tokens);
  const whole = wants.reduce((sum, w) => sum + cost(w.start, w.tokens), 0);
  if (whole <= budget && all.reduce((a, b) => a + b, 0) <= tokensMax) {
    ahead.clear();
    return all;
  }
  // each tenant's prompts (by index) and how far ahead it is; the oldest prompt's tenant first
  const byName = new Map<string, TenantPrompts>();
  wants.forEach((w, i) => {
    assert(w.tokens > 0, 'a prompt in the plan has tokens left');
    const t = byName.get(w.tenant) ?? byName.set(w.tenant, { name: w.tenant, prompts: [], ahead: 0 }).get(w.tenant)!;
    t.ahead = ahead.get(w.tenant) ?? 0;
    t.prompts.push(i);
  });
  const step: StepShares = { wants, tenants: [...byName.values()], price, tokensMax };
  // below this gap between the bounds no tenant could buy two more tokens: spendRest settles the rest
  const cheapest = Math.min(...wants.map((w) => cost(w.start, 1)));
  let [low, high] = [0, Math.max(...step.tenants.map((t) => t.ahead)) + Math.min(whole, budget)];
  let best = fill(step, low);
  for (let bisection = 0; bisection < LEVEL_STEPS && high - low >= cheapest; bisection++) {
    const mid = (low + high) / 2;
    const at = fill(step, mid);
    if (at.spent <= budget && at.tokens <= tokensMax) [low, best] = [mid, at];
    else high = mid;
  }
  spendRest(step, best);
  if (best.tokens === 0 && tokensMax > 0) {
    best.counts[0] = 1;
    best.spentBy[0] = cost(wants[0]!.start, 1); // the oldest prompt is its tenant's first, and its tenant the first
  }
  const still = step.tenants.map((_, j) => j).filter((j) => nextPrompt(step, best, j) !== undefined);
  const behind = Math.min(...still.map((j) => reached(step, best, j)));
  ahead.clear();
  for (const j of still) {
    const by = Math.min(reached(step, best, j) - behind, budget, whole);
    if (by > 0) ahead.set(step.tenants[j]!.name, by);
  }
  return best.counts;
}

/** A tenant's prompts in this step (indexes into the wants, oldest first) and how far ahead it was. */
interface TenantPrompts {
  name: string;
  prompts: number[];
  ahead: number;
}

/** What fairShares shares: the prompts, by tenant, their prices and the step's token bound. */
interface StepShares {
  wants: readonly PromptWant[];
  tenants: readonly TenantPrompts[];
  price: PromptCost;
  tokensMax: number;
}

/** Tokens per prompt, what each tenant (by its place in `tenants`) spends, and the step's totals. */
interface Allotment {
  counts: number[];
  spentBy: Float64Array;
  spent: number;
  tokens: number;
}

/** What every tenant takes when each may spend up to `level` less how far ahead it is: its prompts in order. */
function fill({ wants, tenants, price: { cost } }: StepShares, level: number): Allotment {
  const counts = new Array<number>(wants.length).fill(0);
  const spentBy = new Float64Array(tenants.length);
  let [spent, tokens] = [0, 0];
  tenants.forEach((t, j) => {
    const cap = (level - t.ahead) * (1 + LEVEL_SLACK);
    let mine = 0;
    for (const i of t.prompts) {
      const { start, tokens: want } = wants[i]!;
      const n = cap > 0 ? mostWithin(want, (k) => mine + cost(start, k) <= cap) : 0;
      counts[i] = n;
      mine += cost(start, n);
      tokens += n;
      if (n < want) break;
    }
    spentBy[j] = mine;
    spent += mine;
  });
  return { counts, spentBy, spent, tokens };
}

/** The prompt a tenant would add a token to next: its first left wanting. */
function nextPrompt({ wants, tenants }: StepShares, { counts }: Allotment, j: number): number | undefined {
  return tenants[j]!.prompts.find((i) => counts[i]! < wants[i]!.tokens);
}

/** How far ahead a tenant is with this step's spending. */
function reached({ tenants }: StepShares, { spentBy }: Allotment, j: number): number {
  return tenants[j]!.ahead + spentBy[j]!;
}

/**
 * What the level leaves buys more tokens, one a tenant a pass, the tenant least ahead (with this step's spending)
 * first, for every tenant whose next token still fits.
 */
function spendRest(step: StepShares, a: Allotment): void {
  const { wants, tenants, price, tokensMax } = step;
  const order = tenants.map((_, j) => j);
  for (let granted = 1; granted > 0; ) {
    granted = 0;
    order.sort((x, y) => reached(step, a, x) - reached(step, a, y)); // stable: the oldest first among equals
    for (const j of order) {
      const i = nextPrompt(step, a, j);
      if (i === undefined) continue;
      const { start } = wants[i]!;
      const more = price.cost(start, a.counts[i]! + 1) - price.cost(start, a.counts[i]!);
      if (a.spent + more > price.budget || a.tokens + 1 > tokensMax) continue;
      a.counts[i]!++;
      a.spentBy[j]! += more;
      a.spent += more;
      a.tokens++;
      granted++;
    }
  }
}

/** The most of `want` tokens that `affordable` allows (it holds for 0 and, once false, stays false as k grows). */
function mostWithin(want: number, affordable: (k: number) => boolean): number {
  if (affordable(want)) return want;
  let [low, high] = [0, want]; // affordable(low), not affordable(high)
  while (high - low > 1) {
    const mid = (low + high) >> 1;
    if (affordable(mid)) low = mid;
    else high = mid;
  }
  return low;
}
