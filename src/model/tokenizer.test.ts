import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import fc from 'fast-check';
import { KvfenceError } from '../util/errors.js';
import { type GgufMetadata, metaNumberArray, metaStringArray } from './gguf-types.js';
import { PRE_TOKENIZER_REGEXES } from './pretokenizer.js';
import { tokenizerFromGguf } from './tokenizer.js';
import { TOKEN_TYPE } from './tokenizer-vocab.js';
import { buildTestVocabulary, type TestPreTokenizer } from './vocab-build.js';

const PRES: TestPreTokenizer[] = ['gpt-2', 'llama3', 'qwen2', 'smollm'];

const ROUND_TRIP_TEXTS = [
  'The quick brown fox jumps over the lazy dog',
  'whitespace   runs \t\t and  tabs   ',
  '\n\nnew\nlines\r\n\r\nand CRLF\n',
  'digits 0 12 345 6789 3.14159 1,000,000',
  "contractions: don't, I'LL, we've, you're",
  'non-ASCII: café naïve smörgåsbord 日本語 Ж',
  'emoji: 😊 🌞 ☕ 👩‍👩‍👧 🇯🇵',
  '  leading spaces and symbols $+<=>^~| @#%',
];

const utf8 = (text: string) => new Uint8Array(Buffer.from(text, 'utf8'));

function vocab(kind: 'gpt2' | 'llama', pre: TestPreTokenizer = 'gpt-2', vocabSize = 1024, seed = 1): GgufMetadata {
  return buildTestVocabulary({ kind, pre, vocabSize, seed });
}

function expectInvalid(meta: GgufMetadata, code: 'invalid_model_file' | 'unsupported_model', fragment: string): void {
  assert.throws(
    () => tokenizerFromGguf(meta),
    (e: unknown) =>
      e instanceof KvfenceError && e.code === code && e.message.includes(fragment) && !e.message.includes('\n'),
  );
}

describe('gpt2 tokenizer', () => {
  for (const pre of PRES) {
    it(`round-trips text for ${pre}`, () => {
      const tok = tokenizerFromGguf(vocab('gpt2', pre));
      for (const text of ROUND_TRIP_TEXTS) {
        const ids = tok.encode(text);
        assert.ok(ids.every((id) => id >= 0 && id < tok.vocabSize));
        assert.deepEqual(tok.decodeBytes(ids), utf8(text), text);
        // gpt-2 and llama3 clean " ," and the like on decode, as llama.cpp does; none of these texts has that
        assert.equal(tok.decode(ids), text);
      }
    });
  }

  it('round-trips arbitrary Unicode text through decodeBytes', () => {
    const tokenizers = PRES.map((pre) => tokenizerFromGguf(vocab('gpt2', pre, 600)));
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), (text) => {
        for (const tok of tokenizers) assert.deepEqual(tok.decodeBytes(tok.encode(text)), utf8(text));
      }),
      { numRuns: 300 },
    );
  });

  it('uses learned merges: common words take fewer tokens than bytes', () => {
    const tok = tokenizerFromGguf(vocab('gpt2', 'smollm', 4096));
    const text = 'the harbour was quiet when the first boat came in';
    assert.ok(tok.encode(text).length < text.length / 2);
  });

  it('matches special tokens only with parseSpecial', () => {
    const tok = tokenizerFromGguf(vocab('gpt2', 'smollm'));
    const text = '<|im_start|>user\nHi<|im_end|>';
    const start = tok.vocabSize - 2;
    const end = tok.vocabSize - 1;
    const parsed = tok.encode(text, { parseSpecial: true });
    assert.equal(parsed[0], start);
    assert.equal(parsed.at(-1), end);
    const plain = tok.encode(text);
    assert.ok(!plain.includes(start) && !plain.includes(end));
    assert.equal(tok.decode(plain), text);
    assert.equal(tok.decode(parsed), 'user\nHi', 'control tokens are dropped unless rendered');
    assert.equal(tok.decode(parsed, { renderSpecial: true }), text);
    assert.deepEqual(tok.encode('<|endoftext|>', { parseSpecial: true }), [tok.vocabSize - 3]);
  });

  it('matches user-defined tokens even without parseSpecial, as llama.cpp does', () => {
    const meta = vocab('gpt2', 'qwen2');
    const types = [...metaNumberArray(meta, 'tokenizer.ggml.token_type')!];
    types[types.length - 2] = TOKEN_TYPE.userDefined;
    meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
    const tok = tokenizerFromGguf(meta);
    const ids = tok.encode('a<|im_start|>b<|im_end|>');
    assert.ok(ids.includes(tok.vocabSize - 2), 'user-defined <|im_start|> matched');
    assert.ok(!ids.includes(tok.vocabSize - 1), 'control <|im_end|> not matched');
    assert.equal(tok.decode(ids), 'a<|im_start|>b<|im_end|>', 'user-defined tokens decode as their text');
  });

  it('follows the vocabulary for BOS and end of generation', () => {
    const tok = tokenizerFromGguf(vocab('gpt2', 'qwen2'));
    assert.equal(tok.addBos, false);
    assert.equal(tok.bosId, tok.vocabSize - 3);
    assert.equal(tok.eosId, tok.vocabSize - 1);
    assert.deepEqual(tok.encode('hi', { addSpecial: true }), tok.encode('hi'));
    assert.ok(tok.isEndOfGeneration(tok.vocabSize - 1), '<|im_end|>');
    assert.ok(tok.isEndOfGeneration(tok.vocabSize - 3), '<|endoftext|>');
    assert.ok(!tok.isEndOfGeneration(tok.vocabSize - 2), '<|im_start|>');
    assert.ok(!tok.isEndOfGeneration(0));
    assert.equal(tok.tokenText(tok.vocabSize - 2), '<|im_start|>');
    assert.equal(tok.tokenText(tok.encode(' ')[0]), 'Ġ');
  });

  it('cleans spaces on decode for gpt-2 and llama3 only, as llama.cpp does', () => {
    const text = 'wait , what ? yes .';
    for (const pre of PRES) {
      const tok = tokenizerFromGguf(vocab('gpt2', pre));
      const cleans = pre === 'gpt-2' || pre === 'llama3';
      assert.equal(tok.decode(tok.encode(text)), cleans ? 'wait, what? yes.' : text, pre);
      assert.deepEqual(tok.decodeBytes(tok.encode(text)), utf8(text));
    }
    // each change alone (a text without any comes back as it is, found without the passes), at the start too
    const tok = tokenizerFromGguf(vocab('gpt2', 'llama3'));
    const cleaned: [string, string][] = [
      ['a !', 'a!'],
      ['a .', 'a.'],
      ['a ,', 'a,'],
      ['a ?', 'a?'],
      ["it 's", "it's"],
      ["a ' b", "a'b"],
      ["they 've", "they've"],
      [' .', '.'],
      ['a  .', 'a .'],
      ['. a', '. a'],
      ["x'y ,z", "x'y,z"],
      ['no change here', 'no change here'],
    ];
    for (const [text, want] of cleaned) assert.equal(tok.decode(tok.encode(text)), want, JSON.stringify(text));
  });

  it('adds BOS by default for llama3 when add_bos_token is absent', () => {
    const meta = vocab('gpt2', 'llama3');
    meta.delete('tokenizer.ggml.add_bos_token');
    const tok = tokenizerFromGguf(meta);
    assert.equal(tok.addBos, true);
    assert.deepEqual(tok.encode('hi', { addSpecial: true }), [tok.bosId, ...tok.encode('hi')]);
  });

  it('agrees with @huggingface/tokenizers on ordinary text', () => {
    for (const pre of PRES) {
      const meta = vocab('gpt2', pre, 2000);
      const ours = tokenizerFromGguf(meta);
      const theirs = huggingFaceTokenizer(meta, pre);
      for (const text of ROUND_TRIP_TEXTS) {
        assert.deepEqual(ours.encode(text), theirs.encode(text, { add_special_tokens: false }).ids, `${pre}: ${text}`);
      }
    }
  });
});

/** The same vocabulary as a Hugging Face tokenizer.json: Split(regex) + ByteLevel, BPE with the GGUF merges. */
function huggingFaceTokenizer(meta: GgufMetadata, pre: TestPreTokenizer): HfTokenizer {
  const tokens = metaStringArray(meta, 'tokenizer.ggml.tokens')!;
  const split = PRE_TOKENIZER_REGEXES[pre].map((regex) => ({
    type: 'Split',
    pattern: { Regex: regex },
    behavior: 'Isolated',
    invert: false,
  }));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  const json = {
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [...split, byteLevel] },
    model: {
      type: 'BPE',
      vocab: Object.fromEntries(tokens.map((token, id) => [token, id])),
      merges: metaStringArray(meta, 'tokenizer.ggml.merges')!,
      ignore_merges: pre === 'llama3',
    },
    post_processor: null,
    decoder: { type: 'ByteLevel' },
    added_tokens: [],
  };
  return new HfTokenizer(json, {});
}

describe('llama tokenizer', () => {
  it('round-trips text, dropping the prefix space on decode', () => {
    const tok = tokenizerFromGguf(vocab('llama'));
    for (const text of ROUND_TRIP_TEXTS) {
      const ids = tok.encode(text);
      assert.equal(tok.decode(ids), text);
      assert.deepEqual(tok.decodeBytes(ids), utf8(` ${text}`), 'raw pieces keep the added space');
    }
  });

  it('spells characters outside the vocabulary as byte tokens', () => {
    const tok = tokenizerFromGguf(vocab('llama'));
    const ids = tok.encode('\n🦀');
    assert.deepEqual(
      ids.slice(1).map((id) => tok.tokenText(id)),
      ['<0x0A>', '<0xF0>', '<0x9F>', '<0xA6>', '<0x80>'],
    );
    assert.equal(tok.decode(ids), '\n🦀');
  });

  it('adds BOS with addSpecial and parses <s> </s> <unk> only with parseSpecial', () => {
    const tok = tokenizerFromGguf(vocab('llama'));
    assert.equal(tok.addBos, true);
    assert.equal(tok.bosId, 1);
    assert.equal(tok.eosId, 2);
    assert.deepEqual(tok.encode('Hi', { addSpecial: true }), [1, ...tok.encode('Hi')]);
    assert.deepEqual(tok.encode('<s>Hi</s><unk>', { parseSpecial: true }), [1, ...tok.encode('Hi'), 2, 0]);
    assert.ok(!tok.encode('<s>Hi</s>').includes(1));
    assert.ok(tok.isEndOfGeneration(2));
    assert.ok(!tok.isEndOfGeneration(1));
  });

  it('handles empty text', () => {
    const tok = tokenizerFromGguf(vocab('llama'));
    assert.deepEqual(tok.encode(''), []);
    assert.deepEqual(tok.encode('', { addSpecial: true }), [1]);
    assert.equal(tok.decode([]), '');
  });
});

describe('encodeUpTo', () => {
  const tokenizers = [
    ...PRES.map((pre) => tokenizerFromGguf(vocab('gpt2', pre, 600))),
    tokenizerFromGguf(vocab('llama', 'gpt-2', 600)),
  ];
  const word = (letters: string, n: number) => Array.from({ length: n }, (_, i) => letters[(i * 7) % letters.length]);

  it("gives encode's ids when they number at most max, else undefined", () => {
    const text = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 60 }),
      fc.tuple(fc.constantFrom('ab', '的一是', 'x y', ' \n'), fc.nat(80)).map(([l, n]) => word(l, n).join('')),
    );
    fc.assert(
      fc.property(text, fc.nat(3), fc.integer({ min: -3, max: 3 }), fc.boolean(), (t, which, off, addSpecial) => {
        const tok = tokenizers[which % tokenizers.length]!;
        const ids = tok.encode(t, { addSpecial });
        const max = Math.max(0, ids.length + off);
        assert.deepEqual(tok.encodeUpTo(t, max, { addSpecial }), ids.length <= max ? ids : undefined);
      }),
      { numRuns: 600 },
    );
  });

  it('refuses a word whose length alone passes max without merging it', () => {
    // a 262,144-letter CJK word took 1.2 s to merge on a real vocabulary only to be refused (I11 review): each id
    // stands for at most longestTokenChars bytes, so 3 bytes a letter put it past max before any merge
    const tok = tokenizers[1]!;
    const text = word('的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年', 100_000).join('');
    const max = Math.floor((3 * text.length) / tok.longestTokenChars) - 1;
    const median = (f: () => void) => {
      const ms = [0, 1, 2, 3, 4].map(() => {
        const started = performance.now();
        f();
        return performance.now() - started;
      });
      return ms.sort((a, b) => a - b)[2]!;
    };
    assert.ok(tok.encode(text).length > max);
    assert.equal(tok.encodeUpTo(text, max), undefined);
    const merged = median(() => tok.encode(text));
    const refused = median(() => tok.encodeUpTo(text, max));
    // the refusal pre-tokenizes and byte-encodes the text, no more: a fraction of the merge
    assert.ok(refused < merged / 3, `refused in ${refused.toFixed(1)} ms, merged in ${merged.toFixed(1)} ms`);
  });
});

describe('encodeSteps', () => {
  const tok = tokenizerFromGguf(vocab('gpt2', 'gpt-2', 600));
  /** the steps' answer and how many pauses they made */
  const run = (text: string, max: number) => {
    const steps = tok.encodeSteps(text, max, { parseSpecial: true });
    let pauses = 0;
    let next = steps.next();
    for (; !next.done; next = steps.next()) pauses++;
    return { ids: next.value, pauses };
  };

  it("gives encodeUpTo's ids, pausing through many fragments and through a long word", () => {
    // 100,000 fragments: a special token after every letter. Counted per fragment's words only, they never paused
    const many = '<|im_start|>a'.repeat(50_000);
    const fragments = run(many, Number.POSITIVE_INFINITY);
    assert.deepEqual(fragments.ids, tok.encodeUpTo(many, Number.POSITIVE_INFINITY, { parseSpecial: true }));
    assert.ok(fragments.pauses >= 100, `${fragments.pauses} pauses`);
    const long = 'ab'.repeat(200_000);
    const word = run(long, Number.POSITIVE_INFINITY);
    assert.deepEqual(word.ids, tok.encode(long));
    assert.ok(word.pauses >= 20, `${word.pauses} pauses`);
    // past max in special tokens alone: refused as they are cut (a pause after the longest token's search, which
    // finds none), before the rest of the searches and any word
    assert.deepEqual(run(many, 1_000), { ids: undefined, pauses: 1 });
  });
});

describe('tokenizerFromGguf errors', () => {
  it('rejects missing or inconsistent metadata with one clear line', () => {
    const noTokens = vocab('gpt2');
    noTokens.delete('tokenizer.ggml.tokens');
    expectInvalid(noTokens, 'invalid_model_file', 'tokenizer.ggml.tokens');

    const noModel = vocab('gpt2');
    noModel.delete('tokenizer.ggml.model');
    expectInvalid(noModel, 'invalid_model_file', 'tokenizer.ggml.model');

    const badMerge = vocab('gpt2');
    const firstMerge = metaStringArray(badMerge, 'tokenizer.ggml.merges')![0];
    badMerge.set('tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: [firstMerge, 'nope zzz'] });
    expectInvalid(badMerge, 'invalid_model_file', "'nope zzz'");

    const noMerges = vocab('gpt2');
    noMerges.delete('tokenizer.ggml.merges');
    expectInvalid(noMerges, 'invalid_model_file', 'merges');

    const badBos = vocab('llama');
    badBos.set('tokenizer.ggml.bos_token_id', { type: 'u32', value: 5000 });
    expectInvalid(badBos, 'invalid_model_file', 'bos_token_id');

    const shortTypes = vocab('llama');
    shortTypes.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: [1, 1] });
    expectInvalid(shortTypes, 'invalid_model_file', 'token_type');

    const duplicate = vocab('gpt2');
    const tokens = [...metaStringArray(duplicate, 'tokenizer.ggml.tokens')!];
    tokens[1] = tokens[0];
    duplicate.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
    expectInvalid(duplicate, 'invalid_model_file', 'twice');
  });

  it('rejects unsupported tokenizer models and pre-tokenizers', () => {
    const bert = vocab('gpt2');
    bert.set('tokenizer.ggml.model', { type: 'string', value: 'bert' });
    expectInvalid(bert, 'unsupported_model', "'bert'");

    const pre = vocab('gpt2');
    pre.set('tokenizer.ggml.pre', { type: 'string', value: 'falcon' });
    expectInvalid(pre, 'unsupported_model', "'falcon'");
  });

  it('rejects out-of-range ids on decode', () => {
    const tok = tokenizerFromGguf(vocab('gpt2'));
    assert.throws(() => tok.decode([tok.vocabSize]), KvfenceError);
    assert.throws(() => tok.tokenText(-1), KvfenceError);
  });

  it('spells a character outside the byte-level table as llama.cpp does; a token that would render to GBs is refused', () => {
    /** the vocabulary with one more, normal token: `text` */
    const withToken = (text: string) => {
      const meta = vocab('gpt2');
      const tokens = [...metaStringArray(meta, 'tokenizer.ggml.tokens')!, text];
      const types = [...metaNumberArray(meta, 'tokenizer.ggml.token_type')!, TOKEN_TYPE.normal];
      meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
      meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
      return meta;
    };
    // llama_decode_text: each such character as [UNK_BYTE_0x<its UTF-8> followed by the whole token's text]
    assert.equal(tokenizerFromGguf(withToken('a中b')).decode([1024]), 'a[UNK_BYTE_0xe4b8ada中b]b');
    // 8,000 of them: ~190 MB for this one token, built at load (4-12 s, then a RangeError at 8,000); refused at once
    const started = performance.now();
    expectInvalid(withToken('中'.repeat(8000)), 'invalid_model_file', "token 1024's text renders the vocabulary past");
    assert.ok(performance.now() - started < 2_000, `refused after ${(performance.now() - started).toFixed(0)} ms`);
  });
});
