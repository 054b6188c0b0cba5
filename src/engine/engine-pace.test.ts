// Beside a decoder, a long prompt advances by the paced token count (promptStepMs), not a whole chunk, and the answers
// stay exactly what each request gets alone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request, runToEnd } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import type { AttentionRows, AttentionShape } from '../compute/backend.js';
import type { ForwardInput } from '../compute/forward.js';
import { ReferenceBackend } from '../compute/reference-backend.js';
import type { KvArena } from '../kv/kv-layout.js';
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
  // 5 ms at ≥ 0.25 ms a token: at most 20 tokens (fewer as the prompt's attention grows)
  assert.ok(paced.chunks.length >= 5, `${paced.chunks}`);
  assert.ok(
    paced.chunks.every((n) => n <= 20),
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

/** The reference backend, its attention taking at least `msPerKey` for each cached key it reads. */
class SlowAttention extends ReferenceBackend {
  constructor(private readonly msPerKey: number) {
    super();
  }

  override attention(out: Float32Array, q: Float32Array, rows: AttentionRows, shape: AttentionShape, arena: KvArena) {
    let keys = 0;
    for (let r = 0; r < rows.rowCount; r++) keys += rows.kvLengths[r]! - (rows.kvStarts?.[r] ?? 0);
    const until = performance.now() + keys * this.msPerKey;
    while (performance.now() < until);
    super.attention(out, q, rows, shape, arena);
  }
}

test("beside a prompt deep into its context, another tenant's new prompt gets an equal share of the time", () => {
  const engine = new Engine(
    config({ prefillChunkTokens: 64, stepTokenBudget: 128, promptStepMs: 10 }),
    forwardFor(model, 64, 16, new SlowAttention(0.01)),
  );
  engine.submit(request('decoder', 'a', 8, 200), 0); // decodes all along: the steps are paced
  engine.submit(request('long', 'b', 240, 2), 0);
  let steps = 0;
  while ((engine.runningTable('long')?.writtenTokens ?? 0) < 160) {
    assert.ok(steps++ < 500);
    engine.step(0);
  }
  engine.submit(request('new', 'c', 60, 2), 0);
  const got = { long: 0, new: 0 };
  let before: number[] | undefined; // both prompts' written tokens before a step that had both mid-prompt
  const outcomes = runToEnd(engine, 0, 5000, () => {
    const now = [engine.runningTable('long')?.writtenTokens ?? 240, engine.runningTable('new')?.writtenTokens ?? 60];
    if (before !== undefined) {
      got.long += now[0]! - before[0]!;
      got.new += now[1]! - before[1]!;
    }
    before = now[0]! < 240 && now[1]! < 60 ? now : undefined;
  });
  // deep in, a token of the long prompt reads ~170 keys a layer, the new one's ~30: several times the price (~5×
  // more tokens for the new prompt when idle; shared by token count, about as many)
  assert.ok(
    got.new >= 2 * got.long,
    `while both prefilled: the new prompt ${got.new} tokens, the long one ${got.long}`,
  );
  for (const [id, length] of [
    ['long', 240],
    ['new', 60],
  ] as const) {
    const solo = generate(forwardFor(model, 64, 16), request(id, id === 'long' ? 'b' : 'c', length, 2).promptTokens, {
      maxTokens: 2,
      sampling: GREEDY,
      prefillChunkTokens: 64,
      isStopToken: () => false,
    });
    assert.deepEqual(outcomes.get(id)!.tokens, solo.tokens, `${id}: the same answer as alone`);
  }
});
