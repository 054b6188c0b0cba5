// The step plan: decoders first, then prompt chunks; while anyone decodes, prompts get one chunk a step in all, so
// other tenants' long prompts cannot stretch a decoder's inter-token time past one chunk's prefill (I11).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, request } from '../../test/helpers/engine-run.js';
import { newPageTable } from '../kv/page-table.js';
import { planStep } from './scheduler.js';
import { Sequence } from './sequence.js';
import type { SequenceSampler } from './sequence-sampler.js';

function seq(id: string, promptLength: number, state: 'prefilling' | 'decoding'): Sequence {
  const s = new Sequence(request(id, id, promptLength, 4), 8, 0, {} as unknown as SequenceSampler);
  s.table = newPageTable({ tenant: id, request: id });
  s.state = state;
  if (state === 'decoding') s.nextInput = 1;
  return s;
}

const prefillTokens = (plan: ReturnType<typeof planStep>) =>
  plan.filter((p) => p.seq.state === 'prefilling').map((p) => p.input.tokens.length);

test('prompts alone share the whole step budget, a chunk each; beside decoders one chunk in all', () => {
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
      ['a', 8],
    ],
  );
});
