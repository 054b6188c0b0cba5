/**
 * Continuous batching: which tokens each running sequence feeds this step (admission.ts picks who runs). A sequence
 * is admitted only when its whole need (prompt + maxTokens, in pages) can be reserved, so a running sequence never runs
 * out of pages: no overcommit, no eviction, no truncation (admission may pause a sequence, its pages held: admission.ts).
 *
 * Each step: every decoding sequence feeds its last token (1 each), then prefilling sequences take prompt chunks of
 * at most prefillChunkTokens from what is left of the step token budget — while any sequence decodes, of at most one
 * chunk in all, so a decoder's next token never waits behind several prompts. With a pace (prefill-pace.ts) the
 * step's prompt tokens are sized to a step time instead. Prompt tokens are shared equally among tenants, oldest first
 * inside a tenant.
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

/** How many prompt tokens, in all, the next step may take (prefill-pace.ts learns it from step times). */
export interface StepPace {
  promptTokens(decoding: boolean): number;
}

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
  // While anyone decodes, prompts get one chunk a step in all, or what the pace allows: a step's time is every
  // decoder's inter-token time, so other tenants' long prompts cannot stretch it past that much prefill (I11)
  const decoding = planned.length > 0;
  const paced = pace?.promptTokens(decoding) ?? (decoding ? config.prefillChunkTokens : budget);
  assert(paced >= 1, 'prompts advance every step');
  budget = Math.min(budget, paced);
  const prompts = running.filter((seq) => seq.state === 'prefilling');
  planned.push(
    ...promptChunks(prompts, config.prefillChunkTokens, budget, (seq) => {
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
 * out): at most `chunk` tokens each and `budget` in all, shared among tenants by `fairShares`. Both engines plan their
 * prompts through it, the colocated/decode one and prefill's.
 */
export function promptChunks<S>(
  items: readonly S[],
  chunk: number,
  budget: number,
  of: (item: S) => PromptInProgress,
): { seq: S; input: ForwardInput }[] {
  const prompts = items.map(of);
  const wants = prompts.map((p) => ({
    tenant: p.tenant,
    tokens: Math.min(chunk, p.tokens.length - p.table.writtenTokens),
  }));
  const grants = fairShares(wants, budget);
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

/** A prompt that wants `tokens` of a step (at most a chunk and what is left of it), on behalf of `tenant`. */
interface PromptWant {
  tenant: string;
  tokens: number;
}

/**
 * Prompt tokens per prompt: the budget is shared equally among tenants (what one leaves unused goes to the others),
 * so a tenant with many or long prompts cannot slow another's first token more than an equal share would (I11);
 * inside a tenant, in the given order (oldest first).
 */
function fairShares(wants: readonly PromptWant[], budget: number): number[] {
  const tenants = new Map<string, { want: number; got: number }>();
  for (const w of wants) {
    assert(w.tokens > 0, 'a prompt in the plan has tokens left');
    const t = tenants.get(w.tenant) ?? tenants.set(w.tenant, { want: 0, got: 0 }).get(w.tenant)!;
    t.want += w.tokens;
  }
  let left = budget;
  let open = [...tenants.values()]; // oldest prompt's tenant first: it gets the rounding's spare tokens
  for (let round = 0; left > 0 && open.length > 0; round++) {
    assert(round <= budget, 'every round hands out at least one token');
    const share = Math.max(1, Math.floor(left / open.length));
    for (const t of open) {
      const give = Math.min(share, t.want - t.got, left);
      t.got += give;
      left -= give;
    }
    open = open.filter((t) => t.got < t.want);
  }
  return wants.map((w) => {
    const t = tenants.get(w.tenant)!;
    const count = Math.min(w.tokens, t.got);
    t.got -= count;
    return count;
  });
}
