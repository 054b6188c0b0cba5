// The step plan: decoders first, then prompt chunks; while anyone decodes, prompts get one chunk a step in all, so
// other tenants' long prompts cannot stretch a decoder's inter-token time past one chunk's prefill, and the step's
// prompt cost (tokens, or time priced by position with a pace) is shared equally among tenants (I11).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, request } from '../../test/helpers/engine-run.js';
import { newPageTable } from '../kv/page-table.js';
import { type Ahead, type PromptCost, planStep, type StepPace, TOKEN_COST } from './scheduler.js';
import { Sequence } from './sequence.js';
import type { SequenceSampler } from './sequence-sampler.js';

function seq(id: string, promptLength: number, state: 'prefilling' | 'decoding', tenant = id, written = 0): Sequence {
  const s = new Sequence(request(id, tenant, promptLength, 4), 8, 0, {} as unknown as SequenceSampler);
  s.table = newPageTable({ tenant, request: id });
  s.table.writtenTokens = written;
  s.state = state;
  if (state === 'decoding') s.nextInput = 1;
  return s;
}

/** A pace of `beside` prompt tokens beside decoders and `alone` without them. */
const pace = (beside: number, alone = 64): StepPace => ({
  promptCost: (decoding) => ({ ...TOKEN_COST, budget: decoding ? beside : alone }),
});

/** A pace of `budget` ms whatever the step: a token costs 1 ms plus 0.01 ms for each earlier position it attends to. */
const byPosition = (budget: number): StepPace => {
  const cost: PromptCost = { budget, cost: (start, n) => n + 0.01 * (n * start + (n * (n - 1)) / 2) };
  return { promptCost: () => cost };
};

const prefillTokens = (plan: ReturnType<typeof planStep>) =>
  plan.filter((p) => p.seq.state === 'prefilling').map((p) => p.input.tokens.length);

test('prompts alone share the whole step budget, a chunk each; beside decoders one chunk in all, split by tenant', () => {
  const c = config({ prefillChunkTokens: 8, stepTokenBudget: 64 });
  const prompts = ['a', 'b', 'c'].map((id) => seq(id, 100, 'prefilling'));
  assert.deepEqual(prefillTokens(planStep(c, prompts)), [8, 8, 8]);
  const decoders = ['d', 'e'].map((id) => seq(id, 5, 'decoding'));
  const plan = planStep(c, [...decoders, ...prompts]);
  assert.deepEqual(
    plan.map((p) => [p.seq.id, p.input.tokens.length]),
    [
      ['d', 1],
      ['e', 1],
      ['a', 3],
      ['b', 3],
      ['c', 2],
    ],
  );
});

test('prompts take the paced token count in all, shared by tenant', () => {
  const c = config({ prefillChunkTokens: 16, stepTokenBudget: 64 });
  const prompts = ['a', 'b'].map((id) => seq(id, 100, 'prefilling'));
  const decoders = [seq('d', 5, 'decoding')];
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, ...prompts], pace(3))), [2, 1]);
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, ...prompts], pace(12))), [6, 6]);
  assert.deepEqual(
    prefillTokens(planStep(c, prompts, pace(12, 10))),
    [5, 5],
    'prompts alone: the pace for steps alone',
  );
});

test('a tenant with many prompts gets the same share as a tenant with one; inside a tenant, oldest first', () => {
  const c = config({ prefillChunkTokens: 8, stepTokenBudget: 64 });
  const many = ['x1', 'x2', 'x3'].map((id) => seq(id, 100, 'prefilling', 'x'));
  const one = seq('y1', 100, 'prefilling', 'y');
  const plan = planStep(c, [...many, one], pace(64, 12));
  assert.deepEqual(
    plan.map((p) => [p.seq.id, p.input.tokens.length]),
    [
      ['x1', 6],
      ['y1', 6],
    ],
  );
  // what a tenant cannot use goes to the others: y has 2 tokens left, x takes the other 10 (8 + 2, a chunk at most each)
  const short = seq('y2', 2, 'prefilling', 'y');
  assert.deepEqual(prefillTokens(planStep(c, [...many, short], pace(64, 12))), [8, 2, 2]);
  // prompts alone: the step budget (64) covers every chunk
  assert.deepEqual(prefillTokens(planStep(c, [...many, one])), [8, 8, 8, 8]);
});

test('with a pace, tenants share the step time: a token deep into a long prompt costs more, so it gets fewer', () => {
  const c = config({ prefillChunkTokens: 512, stepTokenBudget: 2048 });
  const deep = seq('long', 120_000, 'prefilling', 'x', 100_000); // 100,000 tokens in: ~1,001 ms a token
  const fresh = seq('short', 400, 'prefilling', 'y'); // at its start: ~1 ms a token
  const decoders = [seq('d', 5, 'decoding')];
  // 2,100 ms: the long prompt's first token costs 1,001, its second another 1,001; the short one takes what the rest
  // buys, 379 tokens for 1,095 ms (its whole 400 would cost 1,198)
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, deep, fresh], byPosition(2100))), [1, 379]);
  // the same by token count: an equal share of the tokens (8 each beside a decoder, the chunk 16)
  assert.deepEqual(prefillTokens(planStep(config({ prefillChunkTokens: 16 }), [...decoders, deep, fresh])), [8, 8]);
  // what the short prompt cannot use goes to the long one: its 9 tokens left cost ~45 ms, the long one's 4 4,004
  const ending = seq('ending', 400, 'prefilling', 'y', 391);
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, deep, ending], byPosition(5000))), [4, 9]);
});

test('with a pace, the token bounds still hold, and a step that affords no token still advances the oldest prompt', () => {
  const c = config({ prefillChunkTokens: 8, stepTokenBudget: 64 });
  const prompts = ['a', 'b'].map((id) => seq(id, 100, 'prefilling'));
  const decoders = [seq('d', 5, 'decoding')];
  // a budget of 1,000 ms buys far more than the 8 tokens (one chunk in all) a step beside decoders may take
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, ...prompts], byPosition(1000))), [4, 4]);
  const deep = ['a', 'b'].map((id) => seq(id, 120_000, 'prefilling', id, 100_000));
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, ...deep], byPosition(50))), [1]);
  // but not past the step's token budget: decoders that fill it leave prompts nothing
  const full = config({ prefillChunkTokens: 8, stepTokenBudget: 2, runningMax: 2 });
  const two = ['d1', 'd2'].map((id) => seq(id, 5, 'decoding'));
  assert.deepEqual(prefillTokens(planStep(full, [...two, ...deep], byPosition(50))), []);
});

test('fair shares: every tenant in the plan gets what an equal share buys, within the budget, for any prompts', () => {
  const c = config({ prefillChunkTokens: 64, stepTokenBudget: 4096, runningMax: 64 });
  const random = (() => {
    let x = 7;
    return (n: number) => {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      return x % n;
    };
  })();
  for (let round = 0; round < 200; round++) {
    const prompts = Array.from({ length: 1 + random(6) }, (_, i) => {
      const written = random(4) === 0 ? random(50_000) : random(100);
      return seq(`p${i}`, written + 1 + random(200), 'prefilling', `t${random(3)}`, written);
    });
    const budget = 1 + random(3000);
    const pace = byPosition(budget);
    const { cost } = pace.promptCost(false);
    const plan = planStep(c, prompts, pace);
    const spent = plan.map((p) => cost(p.seq.table!.writtenTokens, p.input.tokens.length));
    const total = spent.reduce((a, b) => a + b, 0);
    assert.ok(plan.length > 0, 'prompts advance every step');
    assert.ok(total <= budget || (plan.length === 1 && plan[0]!.input.tokens.length === 1), `${total} > ${budget}`);
    // envy-free up to a token: a tenant left wanting, whose next token would have fitted what was left, spent with it
    // at least what any other spent without its last one
    const spentBy = new Map<string, { spent: number; last: number }>();
    plan.forEach((p, i) => {
      const t = spentBy.get(p.seq.tenant) ?? { spent: 0, last: 0 };
      const end = p.seq.table!.writtenTokens + p.input.tokens.length;
      spentBy.set(p.seq.tenant, { spent: t.spent + spent[i]!, last: cost(end - 1, 1) });
    });
    const wanting = new Set<string>();
    for (const s of prompts) {
      if (wanting.has(s.tenant)) continue; // only a tenant's first prompt left wanting could take more
      const got = plan.find((p) => p.seq === s)?.input.tokens.length ?? 0;
      if (got === Math.min(64, s.request.promptTokens.length - s.table!.writtenTokens)) continue;
      wanting.add(s.tenant);
      const next = cost(s.table!.writtenTokens + got, 1);
      const tokens = plan.reduce((n, p) => n + p.input.tokens.length, 0);
      if (total + next > budget || tokens + 1 > 4096) continue; // its next token did not fit what was left
      const mine = spentBy.get(s.tenant)?.spent ?? 0;
      for (const other of spentBy.values())
        assert.ok(other.spent - other.last <= mine + next + 1e-9, `${other.spent} spent beside ${mine} + ${next}`);
    }
  }
});

test('a tenant whose next token costs more than its share falls behind and catches up: equal time over the steps', () => {
  const c = config({ prefillChunkTokens: 512, stepTokenBudget: 2048 });
  // deep: 200,000 tokens in, a token costs ~2,001 ms, more than a third of the 3,600 ms a step; fresh prompts start
  // at ~1 ms a token. Shared step by step alone, the deep prompt would never get a token beside the two others
  const deep = seq('deep', 210_000, 'prefilling', 'x', 200_000);
  const fresh = ['y', 'z'].map((tenant) => seq(tenant, 1_000_000, 'prefilling', tenant));
  const ahead: Ahead = new Map();
  const spent = new Map<string, number>();
  const pace = byPosition(3600);
  const { cost } = pace.promptCost(true);
  for (let step = 0; step < 60; step++) {
    for (const p of planStep(c, [seq('d', 5, 'decoding'), deep, ...fresh], pace, ahead)) {
      const table = p.seq.table!;
      const paid = cost(table.writtenTokens, p.input.tokens.length);
      spent.set(p.seq.tenant, (spent.get(p.seq.tenant) ?? 0) + paid);
      table.writtenTokens += p.input.tokens.length;
    }
  }
  const [x, y, z] = ['x', 'y', 'z'].map((t) => spent.get(t) ?? 0);
  // each tenant got about a third of 60 steps' time: within two deep tokens of the others
  for (const other of [y!, z!]) assert.ok(Math.abs(x! - other) < 2 * 2010, `spent: deep ${x}, fresh ${y} and ${z}`);
  assert.ok(deep.table!.writtenTokens - 200_000 >= 30, `deep tokens: ${deep.table!.writtenTokens - 200_000}`);
});

test('everything that fits is granted whole, whatever the rounding of its prices', () => {
  const c = config({ prefillChunkTokens: 8, stepTokenBudget: 64 });
  // one tenant, prompts at positions 16 and 2 with one token left each: the sums of their prices round
  const prompts = [seq('a', 17, 'prefilling', 't', 16), seq('b', 3, 'prefilling', 't', 2)];
  const cost: PromptCost = { budget: 321, cost: (start, n) => n * 1.001 + 0.1 * start * n };
  assert.deepEqual(prefillTokens(planStep(c, prompts, { promptCost: () => cost })), [1, 1]);
  const many = Array.from({ length: 40 }, (_, i) => seq(`p${i}`, 3 + i, 'prefilling', `t${i % 3}`, 2 + i));
  const bound: PromptCost = { budget: 1e9, cost: (start, n) => n * 0.1 + 1e-7 * (n * start + (n * (n + 1)) / 2) };
  assert.deepEqual(prefillTokens(planStep(c, many, { promptCost: () => bound })), Array(40).fill(1));
});
