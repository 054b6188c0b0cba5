/** Shared pieces of the invariance tests that run on every backend: prompts, sequences, all-position logits. */
import assert from 'node:assert/strict';
import type { ForwardPass } from '../../src/compute/forward.js';
import { pagesForTokens } from '../../src/kv/kv-layout.js';
import { newPageTable, type PageTable } from '../../src/kv/page-table.js';
import type { LoadedModel } from '../../src/model/load-model.js';

/** A deterministic prompt of `length` token ids; `salt` makes different prompts. */
export function promptOf(model: LoadedModel, length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (i * 31 + salt * 7 + 3) % model.config.vocabSize);
}

/** A page table granted enough pages for `tokenCount` tokens. */
export function sequence(forward: ForwardPass, request: string, tokenCount: number): PageTable {
  const table = newPageTable({ tenant: 't', request });
  assert.ok(forward.pool.grow(table, pagesForTokens(forward.pool.layout, tokenCount)));
  return table;
}

/** All-position logits of a prompt, prefilled in chunks of `chunk` tokens; the pages are released after. */
export function prefillLogits(forward: ForwardPass, prompt: number[], chunk: number): Float32Array {
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
