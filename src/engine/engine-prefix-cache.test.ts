import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, runToEnd } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { PrefixCache } from '../kv/prefix-cache.js';
import { Engine } from './engine.js';
import { generate } from './generate.js';
import type { GenerationRequest } from './request.js';
import { GREEDY } from './sampler.js';

const HEAD = Array.from({ length: 40 }, (_, i) => (i * 53 + 9) % 500); // 2.5 pages shared by the prompts below

function ask(id: string, tenant: string, promptTokens: number[], maxTokens = 6): GenerationRequest {
  return { id, tenant, promptTokens, maxTokens, sampling: GREEDY, topLogprobs: 2, tenantKvPagesMax: 64 };
}

function solo(r: GenerationRequest) {
  return generate(forwardFor(model, 64, 16), r.promptTokens, {
    maxTokens: r.maxTokens,
    sampling: GREEDY,
    prefillChunkTokens: 64,
    isStopToken: () => false,
  });
}

function cachedEngine(pageCount: number, pagesPerTenant: number) {
  const forward = forwardFor(model, pageCount, 16);
  const cache = new PrefixCache(forward.pool, pagesPerTenant);
  return { forward, cache, engine: new Engine(config(), forward, { prefixCache: cache }) };
}

test('with a prefix cache every request gets exactly what it gets alone, reusing its tenant’s pages only', () => {
  const { forward, cache, engine } = cachedEngine(64, 16);
  const requests = [
    ask('a1', 'a', [...HEAD, 7, 8, 9]),
    ask('a2', 'a', [...HEAD, 10, 11, 12, 13, 14, 15, 16, 17, 18]),
    ask('a3', 'a', [...HEAD.slice(0, 32)]), // wholly cached: its last page is computed again for the logits
    ask('b1', 'b', [...HEAD, 7, 8, 9]), // the same tokens as a1, another tenant
    ask('a4', 'a', [...HEAD, 7, 8, 9]),
  ];
  engine.submit(requests[0]!, 0);
  const first = runToEnd(engine);
  assert.equal(cache.reusedPages, 0);
  assert.equal(cache.pageCount, 2, 'a1 cached its two whole prompt pages');
  for (const r of requests.slice(1)) engine.submit(r, 0); // concurrently, in one batch
  const rest = runToEnd(engine);
  // a2, a3 (one page: never the last), a4 reuse a's pages; b1 reuses nothing
  assert.equal(cache.reusedPages, 2 + 1 + 2);
  assert.equal(cache.pagesOf('b'), 2, 'b cached its own copy');
  for (const r of requests) {
    const got = (r.id === 'a1' ? first : rest).get(r.id)!;
    const alone = solo(r);
    assert.deepEqual(got.tokens, alone.tokens, `${r.id} tokens`);
    assert.deepEqual(got.logprobs, alone.logprobs, `${r.id} logprobs`);
  }
  const { free, active } = forward.pool.checkConservation();
  assert.equal(active, cache.pageCount, 'after the requests only the cached pages are held');
  assert.equal(free + cache.pageCount, 64);
  assert.equal(engine.stats().pagesCached, cache.pageCount);
});

test('an idle cache never holds a request back: admission evicts it to fit a full-context request', () => {
  const { forward, cache, engine } = cachedEngine(16, 16); // 256 tokens in all
  for (let i = 0; i < 4; i++) {
    engine.submit(ask(`s${i}`, `t${i}`, [...HEAD.slice(i), 1, 2, 3, 4, 5], 2), 0);
    runToEnd(engine);
  }
  assert.equal(cache.pageCount, 8, 'four tenants, two pages each');
  const big = ask(
    'big',
    'x',
    Array.from({ length: 200 }, (_, i) => (i * 7) % 500),
    56,
  );
  engine.submit(big, 0);
  const outcome = runToEnd(engine).get('big')!;
  assert.deepEqual(outcome.tokens, solo(big).tokens);
  assert.equal(cache.pageCount, 0, 'every cached page was given back for the 16-page request');
  assert.equal(forward.pool.checkConservation().free, 16);
});
