// The step plan: decoders first, then prompt chunks; while anyone decodes, prompts get one chunk a step in all, so
// other tenants' long prompts cannot stretch a decoder's inter-token time past one chunk's prefill, and prompt tokens
// are shared equally among tenants (I11).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, request } from '../../test/helpers/engine-run.js';
import { newPageTable } from '../kv/page-table.js';
import { planStep, type StepPace } from './scheduler.js';
import { Sequence } from './sequence.js';
import type { SequenceSampler } from './sequence-sampler.js';

function seq(id: string, promptLength: number, state: 'prefilling' | 'decoding', tenant = id): Sequence {
  const s = new Sequence(request(id, tenant, promptLength, 4), 8, 0, {} as unknown as SequenceSampler);
  s.table = newPageTable({ tenant, request: id });
  s.state = state;
  if (state === 'decoding') s.nextInput = 1;
  return s;
}

/** A pace of `beside` prompt tokens beside decoders and `alone` without them. */
const pace = (beside: number, alone = 64): StepPace => ({ promptTokens: (decoding) => (decoding ? beside : alone) });

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
  const c = config({ prefillChunkTokens: 8, stepTokenBudget: 64 });
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
  const decoders = [seq('d', 5, 'decoding')];
  const plan = planStep(c, [...decoders, ...many, one], pace(12));
  assert.deepEqual(
    plan.map((p) => [p.seq.id, p.input.tokens.length]),
    [
      ['d', 1],
      ['x1', 6],
      ['y1', 6],
    ],
  );
  // what a tenant cannot use goes to the others: y has 2 tokens left, x takes the other 10 (8 + 2, a chunk at most each)
  const short = seq('y2', 2, 'prefilling', 'y');
  assert.deepEqual(prefillTokens(planStep(c, [...decoders, ...many, short], pace(12))), [8, 2, 2]);
  // prompts alone: the step budget (64) covers every chunk
  assert.deepEqual(prefillTokens(planStep(c, [...many, one])), [8, 8, 8, 8]);
});
