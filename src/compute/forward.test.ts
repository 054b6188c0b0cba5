import assert from 'node:assert/strict';
import { test } from 'node:test';
import { forwardFor, loadTestModel } from '../../test/helpers/models.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import { newPageTable, type PageTable } from '../kv/page-table.js';
import type { ForwardPass } from './forward.js';

const model = loadTestModel({ preset: 'tiny', arch: 'qwen2', dtype: 'f32', seed: 11, kvHeadCount: 2 });

function promptOf(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (i * 31 + salt * 7 + 3) % model.config.vocabSize);
}

function sequence(forward: ForwardPass, request: string, tokenCount: number): PageTable {
  const table = newPageTable({ tenant: 't', request });
  assert.ok(forward.pool.grow(table, pagesForTokens(forward.pool.layout, tokenCount)));
  return table;
}

/** All-position logits of a prompt, prefilled in chunks of `chunk` tokens. */
function prefillLogits(forward: ForwardPass, prompt: number[], chunk: number): Float32Array {
  const table = sequence(forward, `chunk-${chunk}`, prompt.length);
  const parts: Float32Array[] = [];
  for (let at = 0; at < prompt.length; at += chunk) {
    const [out] = forward.run([{ table, tokens: prompt.slice(at, at + chunk), logits: 'all' }]);
    assert.ok(out?.ok);
    parts.push(out.logits);
  }
  forward.pool.releaseAll(table);
  const all = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    all.set(p, offset);
    offset += p.length;
  }
  return all;
}

test('chunked prefill (1, 7 and 64 tokens) gives bit-identical logits to one-shot prefill', () => {
  const forward = forwardFor(model, 64, 8);
  const prompt = promptOf(150, 1);
  const oneShot = prefillLogits(forward, prompt, prompt.length);
  for (const chunk of [1, 7, 64]) {
    assert.deepEqual(prefillLogits(forward, prompt, chunk), oneShot, `chunks of ${chunk}`);
  }
  assert.equal(forward.pool.freePageCount, 64);
});

test('a batch of 4 different sequences gives bit-identical logits to each run alone', () => {
  const forward = forwardFor(model, 64, 16);
  const prompts = [promptOf(5, 1), promptOf(40, 2), promptOf(17, 3), promptOf(1, 4)];
  const alone = prompts.map((p) => prefillLogits(forward, p, p.length));
  const tables = prompts.map((p, i) => sequence(forward, `batch-${i}`, p.length + 3));
  const batched = forward.run(prompts.map((p, i) => ({ table: tables[i]!, tokens: p, logits: 'all' as const })));
  batched.forEach((out, i) => {
    assert.ok(out.ok);
    assert.deepEqual(out.logits, alone[i], `sequence ${i}`);
  });
  // decode steps of all four together, with sequences at different positions, match decoding each alone
  const next = [1, 2, 3, 4];
  const stepTogether = forward.run(tables.map((table, i) => ({ table, tokens: [next[i]!], logits: 'last' as const })));
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

test('a sequence whose page was taken over fails alone; the others in the batch still run', () => {
  const forward = forwardFor(model, 8, 16);
  const a = sequence(forward, 'a', 16);
  const b = sequence(forward, 'b', 16);
  assert.ok(forward.run([{ table: a, tokens: promptOf(4, 1), logits: 'none' }])[0]!.ok);
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
