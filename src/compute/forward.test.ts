import assert from 'node:assert/strict';
import { test } from 'node:test';
import { prefillLogits, promptOf, sequence } from '../../test/helpers/forward-checks.js';
import { forwardFor, loadTestModel } from '../../test/helpers/models.js';

const model = loadTestModel({ preset: 'tiny', arch: 'qwen2', dtype: 'f32', seed: 11, kvHeadCount: 2 });

test('chunked prefill (1, 7 and 64 tokens) gives bit-identical logits to one-shot prefill', () => {
  const forward = forwardFor(model, 64, 8);
  const prompt = promptOf(model, 150, 1);
  const oneShot = prefillLogits(forward, prompt, prompt.length);
  for (const chunk of [1, 7, 64]) {
    assert.deepEqual(prefillLogits(forward, prompt, chunk), oneShot, `chunks of ${chunk}`);
  }
  assert.equal(forward.pool.freePageCount, 64);
});

test('a batch of 4 different sequences gives bit-identical logits to each run alone', () => {
  const forward = forwardFor(model, 64, 16);
  const prompts = [promptOf(model, 5, 1), promptOf(model, 40, 2), promptOf(model, 17, 3), promptOf(model, 1, 4)];
  const alone = prompts.map((p) => prefillLogits(forward, p, p.length));
  const tables = prompts.map((p, i) => sequence(forward, `batch-${i}`, p.length + 3));
  const batched = forward.run(prompts.map((p, i) => ({ table: tables[i]!, tokens: p, logits: 'all' as const })));
  batched.forEach((out, i) => {
    assert.ok(out.ok);
    assert.deepEqual(out.logits, alone[i], `sequence ${i}`);
  });
  // the run's attention work: every row's keys over every layer (a row at position p reads p + 1)
  const rowKeys = (p: number) => model.config.layerCount * (p + 1);
  const keysFrom = (start: number, n: number) => Array.from({ length: n }, (_, t) => rowKeys(start + t));
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  assert.equal(forward.lastAttention.keys, sum(prompts.flatMap((p) => keysFrom(0, p.length))));
  assert.ok(forward.lastAttention.ms > 0);
  // decode steps of all four together, with sequences at different positions, match decoding each alone
  const next = [1, 2, 3, 4];
  const stepTogether = forward.run(tables.map((table, i) => ({ table, tokens: [next[i]!], logits: 'last' as const })));
  assert.equal(forward.lastAttention.keys, sum(prompts.map((p) => rowKeys(p.length))));
  tables.forEach((t) => {
    forward.pool.releaseAll(t);
  });
  prompts.forEach((p, i) => {
    const solo = prefillLogits(forward, [...p, next[i]!], p.length + 1);
    const out = stepTogether[i]!;
    assert.ok(out.ok);
    assert.deepEqual(out.logits, solo.slice(p.length * model.config.vocabSize), `decode step of sequence ${i}`);
  });
  assert.equal(forward.pool.freePageCount, 64);
});

test('buffers kept from a larger earlier call leak nothing: a smaller call gives the bits of a fresh forward pass', () => {
  const reused = forwardFor(model, 64, 16);
  const fresh = forwardFor(model, 64, 16);
  const small = promptOf(model, 9, 6);
  // a longer prompt of other tokens, all logits wanted: every buffer, logits included, is left full of its values
  prefillLogits(reused, promptOf(model, 120, 5), 120);
  assert.deepEqual(prefillLogits(reused, small, small.length), prefillLogits(fresh, small, small.length));
  assert.deepEqual(prefillLogits(reused, small, 1), prefillLogits(fresh, small, 1));
});

test("the logits a call returns are its caller's own: disjoint between inputs, untouched by a later call", () => {
  const forward = forwardFor(model, 64, 16);
  const [outA, outB] = forward.run([
    { table: sequence(forward, 'a', 16), tokens: promptOf(model, 3, 1), logits: 'last' },
    { table: sequence(forward, 'b', 16), tokens: promptOf(model, 3, 2), logits: 'all' },
  ]);
  assert.ok(outA?.ok && outB?.ok);
  const keptB = outB.logits.slice();
  outA.logits.fill(Number.NaN);
  assert.deepEqual(outB.logits, keptB, "writing one input's logits leaves another's alone");
  // a later call, with every row's logits wanted, writes as much as the output product can
  assert.ok(forward.run([{ table: sequence(forward, 'c', 16), tokens: promptOf(model, 9, 3), logits: 'all' }])[0]!.ok);
  assert.deepEqual(outB.logits, keptB, "a later call leaves an earlier call's logits alone");
});

test('a sequence whose page was taken over fails alone; the others in the batch still run', () => {
  const forward = forwardFor(model, 8, 16);
  const a = sequence(forward, 'a', 16);
  const b = sequence(forward, 'b', 16);
  assert.ok(forward.run([{ table: a, tokens: promptOf(model, 4, 1), logits: 'none' }])[0]!.ok);
  // Corrupt b's page table so that it points at a's page (what a stale or shared table would do).
  b.pages[0] = a.pages[0]!;
  b.epochs[0] = a.epochs[0]!;
  b.writtenTokens = 4;
  const [outA, outB] = forward.run([
    { table: a, tokens: [5], logits: 'last' },
    { table: b, tokens: [6], logits: 'last' },
  ]);
  assert.ok(outA?.ok);
  assert.ok(outB && !outB.ok);
  assert.equal(outB.error.code, 'kv_isolation_violation');
  assert.match(outB.error.message, /page owned by someone else/);
});
