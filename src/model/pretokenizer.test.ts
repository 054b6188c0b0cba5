import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import {
  BYTE_TO_CHAR,
  byteLevelEncode,
  byteOfChar,
  type PreTokenizerName,
  preTokenize,
  preTokenizerFor,
} from './pretokenizer.js';

// Expected words follow llama.cpp's scanners (checked against llama.cpp token ids in tokenizer-llamacpp.test.ts).
const CASES: Record<PreTokenizerName, [string, string[]][]> = {
  'gpt-2': [
    ["Hello world, it's 2024!", ['Hello', ' world', ',', ' it', "'s", ' 2024', '!']],
    ['a  b\n\n  c', ['a', ' ', ' b', '\n\n ', ' c']],
    ["I'LL DON'T", ['I', "'", 'LL', ' DON', "'", 'T']],
    ['café 日本 😊!!', ['café', ' 日本', ' 😊!!']],
    ['x\r\n\r\ny', ['x', '\r\n\r', '\n', 'y']],
  ],
  llama3: [
    ["Hello world, it's 2024!", ['Hello', ' world', ',', ' it', "'s", ' ', '202', '4', '!']],
    ['a  b\n\n  c', ['a', ' ', ' b', '\n\n', ' ', ' c']],
    ["I'LL DON'T", ['I', "'LL", ' DON', "'T"]],
    ['12345 x1234567', ['123', '45', ' x', '123', '456', '7']],
    ['x\r\n\r\ny', ['x', '\r\n\r\n', 'y']],
  ],
  qwen2: [
    ['12345 x12', ['1', '2', '3', '4', '5', ' x', '1', '2']],
    ["I'LL DON'T", ['I', "'LL", ' DON', "'T"]],
    ['a  b\n\n  c', ['a', ' ', ' b', '\n\n', ' ', ' c']],
  ],
  smollm: [
    ["it's 2024!", ['it', "'s", ' ', '2', '0', '2', '4', '!']],
    ['a  b\n\n  c', ['a', ' ', ' b', '\n\n ', ' c']],
    ['$5+3=8 a..b', ['$', '5', '+', '3', '=', '8', ' a', '..', 'b']],
  ],
  default: [
    ["it's 2024!", ['it', "'", 's', ' ', '202', '4', '!']],
    ['foo   bar  ', ['foo', '  ', ' bar', '  ']],
  ],
};

describe('preTokenize', () => {
  for (const [pre, cases] of Object.entries(CASES) as [PreTokenizerName, [string, string[]][]][]) {
    it(`splits like llama.cpp for ${pre}`, () => {
      for (const [text, words] of cases) assert.deepEqual(preTokenize(text, pre), words, JSON.stringify(text));
    });
  }

  it('never loses or reorders text', () => {
    const text = 'Mixed: 12 apples, 3½ pears;\t\ttabs\u00a0nbsp\u0085nel 日本語 👩‍👧 end   ';
    for (const pre of Object.keys(CASES) as PreTokenizerName[]) {
      const words = preTokenize(text, pre);
      assert.equal(words.join(''), text, pre);
      assert.ok(words.every((w) => w.length > 0));
    }
  });

  it("classifies code points by llama.cpp's Unicode table, not by Node's newer one", () => {
    // U+13A6C (Egyptian hieroglyph, Unicode 16) is a letter to Node but unknown to llama.cpp's table
    assert.deepEqual(preTokenize('W\u{13A6C}E', 'gpt-2'), ['W', '\u{13A6C}', 'E']);
    assert.deepEqual(preTokenize('x² ٣', 'qwen2'), ['x', '²', ' ', '٣']);
  });

  it('reads lone surrogates as U+FFFD, as llama.cpp sees them', () => {
    assert.deepEqual(preTokenize('a\ud800', 'gpt-2'), ['a', '\ufffd']);
  });
});

describe('preTokenizerFor', () => {
  it('maps names and aliases, and absence to llama.cpp default', () => {
    assert.equal(preTokenizerFor(undefined), 'default');
    assert.equal(preTokenizerFor('llama-bpe'), 'llama3');
    assert.equal(preTokenizerFor('smollm'), 'smollm');
  });

  it('rejects unknown types with unsupported_model', () => {
    assert.throws(
      () => preTokenizerFor('deepseek-coder'),
      (e: unknown) => e instanceof KvfenceError && e.code === 'unsupported_model' && e.message.includes('deepseek'),
    );
    assert.throws(() => preTokenizerFor('toString'), KvfenceError);
  });
});

describe('byte-level encoding', () => {
  it('is GPT-2 bytes_to_unicode', () => {
    assert.equal(new Set(BYTE_TO_CHAR).size, 256);
    assert.equal(BYTE_TO_CHAR[0x41], 'A');
    assert.equal(BYTE_TO_CHAR[0x20], 'Ġ');
    assert.equal(BYTE_TO_CHAR[0x0a], 'Ċ');
    assert.equal(byteLevelEncode(' é'), 'ĠÃ©');
    for (let b = 0; b < 256; b++) assert.equal(byteOfChar(BYTE_TO_CHAR[b]), b);
    assert.equal(byteOfChar('日'), undefined);
  });
});
