/**
 * Continuous batching: which tokens each running sequence feeds this step (admission.ts picks who runs). A sequence
 * is admitted only when its whole need (prompt + maxTokens, in pages) can be reserved, so a running sequence never runs
 * out of pages: no overcommit, no preemption, no truncation.
 *
 * Each step: every decoding sequence feeds its last token (1 each), then prefilling sequences, oldest first, take
 * prompt chunks of at most prefillChunkTokens from what is left of the step token budget — and, while any sequence
 * decodes, of at most prefillChunkTokens in all, so a decoder's next token never waits behind several prompts.
 */
import type { ForwardInput } from '../compute/forward.js';
import { assert } from '../util/assert.js';
import type { EngineConfig } from './engine-config.js';
import type { Sequence } from './sequence.js';

export interface PlannedInput {
  seq: Sequence;
  input: ForwardInput;
}

/** This step's forward inputs: decode tokens first, then prefill chunks under the step token budget. */
export function planStep(config: EngineConfig, running: readonly Sequence[]): PlannedInput[] {
  const planned: PlannedInput[] = [];
  let budget = config.stepTokenBudget;
  for (const seq of running) {
    if (seq.state !== 'decoding') continue;
    assert(seq.table !== undefined && seq.nextInput !== undefined, 'a decoding sequence has pages and a token to feed');
    planned.push({ seq, input: { table: seq.table, tokens: [seq.nextInput], logits: 'last' } });
    budget--;
  }
  assert(budget >= 0, 'the step budget covers every decoding sequence (validated at startup)');
  // While anyone decodes, prompts get one chunk a step in all: a step's time is every decoder's inter-token time, so
  // other tenants' long prompts cannot stretch it past one chunk's prefill (I11)
  if (planned.length > 0) budget = Math.min(budget, config.prefillChunkTokens);
  for (const seq of running) {
    if (seq.state !== 'prefilling' || budget === 0) continue;
    assert(seq.table !== undefined, 'a prefilling sequence has pages');
    const prompt = seq.request.promptTokens;
    const start = seq.table.writtenTokens;
    const count = Math.min(config.prefillChunkTokens, prompt.length - start, budget);
    assert(count > 0, 'a prefilling sequence has prompt left');
    const last = start + count === prompt.length;
    planned.push({
      seq,
      input: { table: seq.table, tokens: prompt.slice(start, start + count), logits: last ? 'last' : 'none' },
    });
    budget -= count;
  }
  return planned;
}
