import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { type GgufMetadata, metaBool, metaNumber, metaNumberArray, metaString, metaStringArray } from './gguf-types.js';
import { tokenizerFromGguf } from './tokenizer.js';
import { TOKEN_TYPE } from './tokenizer-vocab.js';
import { buildTestVocabulary, type TestVocabOptions } from './vocab-build.js';

const serialize = (meta: GgufMetadata) => JSON.stringify([...meta]);

function tokensOf(meta: GgufMetadata): string[] {
  return metaStringArray(meta, 'tokenizer.ggml.tokens')!;
}

describe('buildTestVocabulary', () => {
  it('is deterministic: same options give identical metadata', () => {
    for (const kind of ['gpt2', 'llama'] as const) {
      const options: TestVocabOptions = { kind, pre: 'smollm', vocabSize: 8000, seed: 42 };
      assert.equal(serialize(buildTestVocabulary(options)), serialize(buildTestVocabulary(options)));
    }
  });

  it('varies the filler, not the learned part, with the seed', () => {
    for (const kind of ['gpt2', 'llama'] as const) {
      const a = tokensOf(buildTestVocabulary({ kind, pre: 'qwen2', vocabSize: 8000, seed: 1 }));
      const b = tokensOf(buildTestVocabulary({ kind, pre: 'qwen2', vocabSize: 8000, seed: 2 }));
      assert.notDeepEqual(a, b);
      assert.deepEqual(a.slice(0, 600), b.slice(0, 600), 'learned merges come first and ignore the seed');
    }
  });

  it('has exactly vocabSize tokens, all distinct, with consistent metadata', () => {
    for (const kind of ['gpt2', 'llama'] as const) {
      for (const vocabSize of [512, 1000, 32000, 49152]) {
        const meta = buildTestVocabulary({ kind, pre: 'gpt-2', vocabSize, seed: 3 });
        const tokens = tokensOf(meta);
        assert.equal(tokens.length, vocabSize);
        assert.equal(new Set(tokens).size, vocabSize);
        assert.equal(metaNumberArray(meta, 'tokenizer.ggml.token_type')!.length, vocabSize);
        const tok = tokenizerFromGguf(meta); // validates merges and special ids
        assert.equal(tok.vocabSize, vocabSize);
      }
    }
  });

  it('lays out a gpt2 vocabulary like SmolLM2/Qwen2: bytes, merges, then ChatML control tokens', () => {
    const meta = buildTestVocabulary({ kind: 'gpt2', pre: 'llama3', vocabSize: 600, seed: 1 });
    const tokens = tokensOf(meta);
    assert.equal(tokens[0], '!');
    assert.deepEqual(tokens.slice(-3), ['<|endoftext|>', '<|im_start|>', '<|im_end|>']);
    assert.deepEqual(metaNumberArray(meta, 'tokenizer.ggml.token_type')!.slice(-4), [1, 3, 3, 3]);
    assert.equal(metaStringArray(meta, 'tokenizer.ggml.merges')!.length, 600 - 256 - 3);
    assert.equal(metaString(meta, 'tokenizer.ggml.pre'), 'llama3');
    assert.equal(metaNumber(meta, 'tokenizer.ggml.bos_token_id'), 597);
    assert.equal(metaNumber(meta, 'tokenizer.ggml.eos_token_id'), 599);
    assert.equal(metaBool(meta, 'tokenizer.ggml.add_bos_token'), false);
    assert.match(metaString(meta, 'tokenizer.chat_template')!, /<\|im_start\|>/);
  });

  it('lays out a llama vocabulary like Llama 2: specials, byte tokens, scored pieces', () => {
    const meta = buildTestVocabulary({ kind: 'llama', pre: 'gpt-2', vocabSize: 1000, seed: 1 });
    const tokens = tokensOf(meta);
    const types = metaNumberArray(meta, 'tokenizer.ggml.token_type')!;
    const scores = metaNumberArray(meta, 'tokenizer.ggml.scores')!;
    assert.deepEqual(tokens.slice(0, 4), ['<unk>', '<s>', '</s>', '<0x00>']);
    assert.equal(tokens[258], '<0xFF>');
    assert.deepEqual(types.slice(0, 4), [TOKEN_TYPE.unknown, TOKEN_TYPE.control, TOKEN_TYPE.control, TOKEN_TYPE.byte]);
    assert.ok(tokens.includes('▁the'));
    assert.ok(
      scores.slice(259).every((s, i, all) => i === 0 || s < all[i - 1]),
      'earlier pieces score higher',
    );
    assert.equal(metaBool(meta, 'tokenizer.ggml.add_bos_token'), true);
    assert.equal(metaString(meta, 'tokenizer.ggml.pre'), undefined);
    assert.match(metaString(meta, 'tokenizer.chat_template')!, /\[INST\]/);
  });

  it('builds a 49152-token gpt2 vocabulary quickly', () => {
    const started = performance.now();
    buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 49152, seed: 9 });
    const elapsedMs = performance.now() - started;
    assert.ok(elapsedMs < 2000, `took ${elapsedMs.toFixed(0)} ms`);
  });

  it('rejects sizes too small to hold the fixed tokens', () => {
    assert.throws(() => buildTestVocabulary({ kind: 'gpt2', pre: 'gpt-2', vocabSize: 200, seed: 1 }), KvfenceError);
    assert.throws(() => buildTestVocabulary({ kind: 'llama', pre: 'gpt-2', vocabSize: 300, seed: 1 }), KvfenceError);
    assert.throws(() => buildTestVocabulary({ kind: 'gpt2', pre: 'gpt-2', vocabSize: 1.5, seed: 1 }), KvfenceError);
  });
});
