// Beside a decoder, a long prompt advances by the paced token count (promptStepMs), not a whole chunk, and the answers
// stay exactly what each request gets alone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request, runToEnd } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import type { ForwardInput } from '../compute/forward.js';
import { Engine } from './engine.js';
import { generate } from './generate.js';
import { GREEDY } from './sampler.js';

/** A forward pass that takes at least `msPerToken` a token: a model slow enough that pacing has something to do. */
function slowForward(msPerToken: number) {
  const forward = forwardFor(model, 64, 16);
  const run = forward.run.bind(forward);
  forward.run = (inputs: readonly ForwardInput[]) => {
    const tokens = inputs.reduce((n, input) => n + input.tokens.length, 0);
    const until = performance.now() + tokens * msPerToken;
    while (performance.now() < until);
    return run(inputs);
  };
  return forward;
}

/** The prompt tokens the long request got on each step that also decoded the short one. */
function chunksBesideDecoder(promptStepMs: number | undefined): { chunks: number[]; tokens: number[] } {
  const engine = new Engine(
    config({ prefillChunkTokens: 64, stepTokenBudget: 128, ...(promptStepMs !== undefined ? { promptStepMs } : {}) }),
    slowForward(0.25),
  );
  engine.submit(request('short', 'a', 20, 40), 0);
  engine.step(0); // the short prompt alone (timed: ≥ 0.25 ms a token)
  engine.submit(request('long', 'b', 200, 2), 0);
  const chunks: number[] = [];
  let written = 0;
  const outcomes = runToEnd(engine, 0, 5000, () => {
    const table = engine.runningTable('long');
    if (table === undefined) return;
    if (table.writtenTokens > written && engine.runningRequestsOf('a').length > 0) {
      chunks.push(table.writtenTokens - written);
    }
    written = table.writtenTokens;
  });
  return { chunks, tokens: outcomes.get('long')!.tokens };
}

test('beside a decoder, prompt chunks shrink to the prompt step time and results do not change', () => {
  const unpaced = chunksBesideDecoder(undefined);
  assert.ok(unpaced.chunks.includes(64), `whole chunks without pacing: ${unpaced.chunks}`);
  const paced = chunksBesideDecoder(5);
  // 5 ms at ≥ 0.25 ms a token: at most 20 tokens, and never below a page but for the prompt's last chunk
  assert.ok(paced.chunks.length >= 5, `${paced.chunks}`);
  assert.ok(
    paced.chunks.every((n, i) => n <= 20 && (n >= 16 || i === paced.chunks.length - 1)),
    `paced chunks ${paced.chunks}`,
  );
  const solo = generate(forwardFor(model, 64, 16), request('long', 'b', 200, 2).promptTokens, {
    maxTokens: 2,
    sampling: GREEDY,
    prefillChunkTokens: 64,
    isStopToken: () => false,
  });
  assert.deepEqual(paced.tokens, solo.tokens);
  assert.deepEqual(unpaced.tokens, solo.tokens);
});
