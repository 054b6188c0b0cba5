import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { metaStringArray } from './gguf-types.js';
import { hfVocabulary } from './hf-tokenizer.js';

/** A byte-level BPE tokenizer.json (Llama 3's split expression) with this vocabulary and these added tokens. */
function tokenizerJson(vocab: Record<string, unknown>, added: unknown[] = []) {
  return { model: { type: 'BPE', vocab, merges: [] }, pre_tokenizer: { pattern: '\\p{N}{1,3}' }, added_tokens: added };
}

const refused = (pattern: RegExp) => (e: unknown) =>
  e instanceof KvfenceError && e.code === 'invalid_argument' && pattern.test(e.message);

test('ids fill the vocabulary up to the largest, unused ones as [PAD<id>]', () => {
  const { metadata, vocabSize } = hfVocabulary(tokenizerJson({ a: 0, b: 2 }, [{ id: 3, content: '<x>' }]), {}, 't');
  assert.equal(vocabSize, 4);
  assert.deepEqual(metaStringArray(metadata, 'tokenizer.ggml.tokens'), ['a', '[PAD1]', 'b', '<x>']);
});

test('an id at or above the vocabulary limit is refused before it sizes the vocabulary', () => {
  const id = LIMITS.vocabSizeMax;
  const limit = new RegExp(`has id ${id}, expected an integer from 0 below ${id} \\(LIMITS\\.vocabSizeMax\\)`);
  assert.throws(() => hfVocabulary(tokenizerJson({ a: 0, b: id }), {}, 't'), refused(limit));
  assert.throws(() => hfVocabulary(tokenizerJson({ a: 0 }, [{ id, content: '<x>' }]), {}, 't'), refused(limit));
});

test('an added token without a non-negative integer id or without content is refused, not dropped', () => {
  for (const [entry, pattern] of [
    [{ id: -1, content: '<x>' }, /added token '<x>' has id -1/],
    [{ id: 0.5, content: '<x>' }, /added token '<x>' has id 0\.5/],
    [{ content: '<x>' }, /added token '<x>' has id undefined/],
    [{ id: 1 }, /added_tokens\[0\] has no content/],
  ] as const) {
    assert.throws(() => hfVocabulary(tokenizerJson({ a: 0 }, [entry]), {}, 't'), refused(pattern));
  }
});
