import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { tokenizerFromGguf } from '../model/tokenizer.js';
import { buildTestVocabulary } from '../model/vocab-build.js';
import { SeededRandom } from '../util/random.js';
import { hasBit } from './compiled-grammar.js';
import { GrammarCache, grammarCacheFor, type OutputConstraint } from './grammar-cache.js';
import { GrammarMatcher } from './grammar-matcher.js';
import { TokenIndex } from './token-index.js';

const SCHEMAS: OutputConstraint[] = [
  { kind: 'json_object' },
  {
    kind: 'json_schema',
    schema: {
      type: 'object',
      properties: {
        name: { type: 'string', minLength: 2, maxLength: 6 },
        n: { type: 'number' },
        kind: { enum: ['alpha', 'alps', 'beta'] },
        items: {
          type: 'array',
          items: { anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 3 }] },
          maxItems: 3,
        },
      },
      required: ['name', 'kind'],
      additionalProperties: false,
    },
  },
];

/**
 * The fast mask (cached classes per state + string scans) against the definition: a token is allowed iff accepting
 * it leaves a valid prefix. Checked at every step of random walks, for both tokenizer kinds.
 */
describe('token masks', () => {
  for (const kind of ['gpt2', 'llama'] as const) {
    it(`equal the token-by-token check along random walks (${kind} vocabulary)`, () => {
      const tokenizer = tokenizerFromGguf(buildTestVocabulary({ kind, pre: 'smollm', vocabSize: 700, seed: 3 }));
      const index = new TokenIndex(tokenizer);
      const cache = new GrammarCache(index);
      const random = new SeededRandom(11);
      const bits = new Uint32Array(Math.ceil(index.vocabSize / 32));
      let finished = 0;
      for (const constraint of SCHEMAS) {
        const compiled = cache.compile(constraint, 'a');
        for (let walk = 0; walk < 6; walk++) {
          const m = new GrammarMatcher(compiled);
          const text: Uint8Array[] = [];
          for (let step = 0; step < 40 && !m.finished; step++) {
            m.fillMask(bits);
            const allowed: number[] = [];
            for (let t = 0; t < index.vocabSize; t++) {
              const probe = Object.create(m) as GrammarMatcher; // shares the position; accept() replaces it on the probe
              assert.equal(hasBit(bits, t), probe.accept(t), `token ${t} at ${Buffer.concat(text).toString()}`);
              if (hasBit(bits, t)) allowed.push(t);
            }
            assert.ok(allowed.length > 0, 'a valid prefix always has a way forward');
            const t = allowed[random.nextInt(allowed.length)]!;
            assert.ok(m.accept(t));
            text.push(tokenizer.decodeBytes([t]));
          }
          if (m.finished) {
            finished++;
            assert.doesNotThrow(() => JSON.parse(Buffer.concat(text).toString()));
          }
        }
        assert.ok(compiled.cachedStates > 0, 'the precomputed per-state classes were used');
      }
      assert.ok(finished > 0, 'some walks finish their document');
    });
  }

  it('a worker’s cache has its token index and every string scan before its first response format', () => {
    // built at the first response format, on the engine's thread, they held every stream for 0.4–1.3 s (128k tokens)
    const tokenizer = tokenizerFromGguf(buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 700, seed: 3 }));
    const cache = grammarCacheFor(tokenizer);
    assert.equal(cache.index.scannedStrings, 14, 'every sub-state inside a string');
  });

  it('end-of-generation is for the caller once the document may end; the cache reuses compiled grammars', () => {
    const tokenizer = tokenizerFromGguf(buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 600, seed: 1 }));
    const cache = new GrammarCache(new TokenIndex(tokenizer), 2);
    const integer: OutputConstraint = { kind: 'json_schema', schema: { type: 'integer' } };
    const compiled = cache.compile(integer, 'a');
    assert.equal(cache.compile(integer, 'a'), compiled);
    const m = new GrammarMatcher(compiled);
    const bits = new Uint32Array(Math.ceil(600 / 32));
    assert.equal(m.fillMask(bits), false);
    assert.ok(m.accept(tokenizer.encode('7')[0]!));
    assert.equal(m.fillMask(bits), true, 'an integer may end after a digit');
    assert.ok(m.complete && !m.finished);
    cache.compile({ kind: 'json_object' }, 'a');
    cache.compile({ kind: 'json_schema', schema: { type: 'boolean' } }, 'a');
    assert.equal(cache.size, 2);
    assert.notEqual(cache.compile(integer, 'a'), compiled, 'the least recently used entry went first');
  });

  it('the cache is each tenant’s own: another tenant’s same schema is compiled again, and a tenant evicts its own', () => {
    const tokenizer = tokenizerFromGguf(buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 600, seed: 1 }));
    const cache = new GrammarCache(new TokenIndex(tokenizer), 4, 2);
    const schema = (type: string): OutputConstraint => ({ kind: 'json_schema', schema: { type } });
    const mine = cache.compile(schema('integer'), 'a');
    assert.notEqual(cache.compile(schema('integer'), 'b'), mine, 'b never gets a’s compiled grammar (no hit to time)');
    assert.equal(cache.compile(schema('integer'), 'a'), mine);
    const bs = cache.compile(schema('boolean'), 'b');
    cache.compile(schema('string'), 'a'); // a's second: room for it, nothing of b's goes
    cache.compile(schema('number'), 'a'); // a evicts its own least recently used (integer)
    assert.equal(cache.size, 4);
    assert.equal(cache.compile(schema('boolean'), 'b'), bs, 'b’s entries stayed');
    assert.notEqual(cache.compile(schema('integer'), 'a'), mine, 'a’s oldest went');
  });
});
