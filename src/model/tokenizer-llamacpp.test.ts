/**
 * Differential test against llama.cpp (through node-llama-cpp's prebuilt CPU binary): our tokenizer must give the same
 * token ids and the same detokenized text as llama.cpp on the generated test models, with and without special-token
 * parsing. node-llama-cpp's tokenize never adds BOS, so encode runs with addSpecial off here.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { getLlama, type Llama, LlamaLogLevel, type LlamaModel, type Token } from 'node-llama-cpp';
import { SeededRandom } from '../util/random.js';
import { TRAINING_CORPUS } from './corpus.js';
import {
  type GgufMetadata,
  type GgufTensor,
  metaNumberArray,
  Q8_0_BLOCK_BYTES,
  Q8_0_BLOCK_SIZE,
} from './gguf-types.js';
import { writeGguf } from './gguf-write.js';
import { makeTestModel, type PreTokenizerName } from './test-model.js';
import { tokenizerFromGguf } from './tokenizer.js';
import { TOKEN_TYPE } from './tokenizer-vocab.js';
import { buildTestVocabulary, type TestTokenizerKind } from './vocab-build.js';

const FIXED_TEXTS = [
  'Hello world',
  ' Hello',
  '  two leading spaces',
  'trailing spaces   ',
  '\n\nnewlines\r\n\tTabs\t\t and\r carriage',
  'a\u00a0b\u2009c\u3000d\u0085e\ufeff',
  '12345 1234567 3.14159 1,000,000 ²³ ١٢٣',
  "don't I'LL we've YOU'RE it's 'tis",
  'café naïve smörgåsbord 日本語 Жж',
  '😊🌞☕ 👩‍👩‍👧 🇯🇵',
  '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
  '<|endoftext|><|endoftext|>x<|im_end',
  '<s>[INST] Hello [/INST] Hi </s><unk><0x41>',
  'x = [1, 2, 3]; y = {k: v for k, v in zip("ab", x)}',
  '    indented code\n        more()\n',
  '!!! ??? ... --- $$$ +++ <=> ^^ ~~ || ``',
  'wait , what ? yes . no !',
  'the harbour was quiet when the first boat came in.',
  'Ġ Ċ ▁ ▁▁ lone\ud800surrogate',
  '',
  ' ',
  '\n',
];

const ATOMS = [
  ...'abcZ0189 \n\t\r.,!?\'"-_$+<>=^~|`()[]{}@#%&*/\\:;',
  'the',
  '  ',
  '\r\n',
  "'s",
  "'LL",
  'é',
  'ß',
  'Ж',
  '日本',
  '²',
  '١',
  '😊',
  '\u00a0',
  '\u0085',
  '\u3000',
  '<|im_start|>',
  '<|im_end|>',
  '<|endoftext|>',
  '<s>',
  '</s>',
  '<unk>',
  '▁',
];

/** Random texts: corpus excerpts and strings of atoms chosen to hit split and merge edge cases. */
function randomTexts(count: number, seed: number): string[] {
  const random = new SeededRandom(seed);
  return Array.from({ length: count }, () => {
    if (random.nextInt(3) === 0) {
      const start = random.nextInt(TRAINING_CORPUS.length);
      return TRAINING_CORPUS.slice(start, start + random.nextInt(300));
    }
    let text = '';
    for (let n = random.nextInt(40); n > 0; n--) text += ATOMS[random.nextInt(ATOMS.length)];
    return text;
  });
}

interface Case {
  name: string;
  kind: TestTokenizerKind;
  pre?: PreTokenizerName;
  /** replaces the tiny preset's vocabulary by one this large (embeddings resized to match) */
  vocabSize?: number;
  /** edits the metadata before the file is written */
  tweak?: (meta: GgufMetadata) => void;
}

/** Makes <|im_start|> a user-defined token (type 4): llama.cpp matches those in text even without parseSpecial. */
function userDefinedImStart(meta: GgufMetadata): void {
  const types = [...metaNumberArray(meta, 'tokenizer.ggml.token_type')!];
  types[types.length - 2] = TOKEN_TYPE.userDefined;
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
}

const CASES: Case[] = [
  { name: 'gpt2 gpt-2', kind: 'gpt2', pre: 'gpt-2' },
  { name: 'gpt2 llama3', kind: 'gpt2', pre: 'llama3' },
  { name: 'gpt2 qwen2', kind: 'gpt2', pre: 'qwen2' },
  { name: 'gpt2 smollm', kind: 'gpt2', pre: 'smollm' },
  { name: 'llama', kind: 'llama' },
  { name: 'gpt2 without tokenizer.ggml.pre', kind: 'gpt2', tweak: (meta) => meta.delete('tokenizer.ggml.pre') },
  { name: 'gpt2 user-defined token', kind: 'gpt2', pre: 'qwen2', tweak: userDefinedImStart },
  { name: 'gpt2 smollm 49152 (filler merges)', kind: 'gpt2', pre: 'smollm', vocabSize: 49152 },
  { name: 'gpt2 llama3 32000 (filler merges)', kind: 'gpt2', pre: 'llama3', vocabSize: 32000 },
  { name: 'llama 32000 (filler pieces)', kind: 'llama', vocabSize: 32000 },
];

function writeCaseModel(c: Case, dir: string): { path: string; metadata: GgufMetadata } {
  const model = makeTestModel({
    preset: 'tiny',
    arch: 'llama',
    dtype: 'f32',
    seed: 5,
    tokenizer: c.kind,
    ...(c.pre === undefined ? {} : { pre: c.pre }),
  });
  let tensors = model.tensors;
  if (c.vocabSize !== undefined) {
    const vocabSize = c.vocabSize;
    for (const [key, value] of buildTestVocabulary({ kind: c.kind, pre: c.pre ?? 'gpt-2', vocabSize, seed: 5 })) {
      model.metadata.set(key, value);
    }
    model.metadata.set('llama.vocab_size', { type: 'u32', value: vocabSize });
    tensors = tensors.map((t): GgufTensor => {
      if (t.name !== 'token_embd.weight' && t.name !== 'output.weight') return t;
      // zero q8_0 blocks: the smallest valid weights, since only the vocabulary is under test here
      const dim = t.dims[0];
      const data = new Uint8Array(((dim * vocabSize) / Q8_0_BLOCK_SIZE) * Q8_0_BLOCK_BYTES);
      return { name: t.name, dtype: 'q8_0', dims: [dim, vocabSize], data };
    });
  }
  c.tweak?.(model.metadata);
  const path = join(dir, `${c.name.replaceAll(/[^a-z0-9]+/g, '-')}.gguf`);
  writeGguf(path, model.metadata, tensors);
  return { path, metadata: model.metadata };
}

describe('tokenizer matches llama.cpp', () => {
  let llama: Llama;
  let dir: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvfence-tok-'));
    llama = await getLlama({ gpu: false, build: 'never', skipDownload: true, logLevel: LlamaLogLevel.error });
  });

  after(async () => {
    await llama?.dispose();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  for (const c of CASES) {
    it(c.name, async () => {
      const { path, metadata } = writeCaseModel(c, dir);
      const tok = tokenizerFromGguf(metadata);
      const model: LlamaModel = await llama.loadModel({ modelPath: path, vocabOnly: true });
      try {
        assert.equal(model.tokens.bos, tok.bosId ?? null, 'bos');
        assert.equal(model.tokens.eos, tok.eosId ?? null, 'eos');
        for (let id = 0; id < tok.vocabSize; id++) {
          assert.equal(tok.isEndOfGeneration(id), model.isEogToken(id as Token), `end of generation for ${id}`);
        }
        const texts = [...FIXED_TEXTS, ...randomTexts(c.vocabSize === undefined ? 300 : 100, 17)];
        for (const text of texts) {
          for (const parseSpecial of [false, true]) {
            const expected = Array.from(model.tokenize(text, parseSpecial));
            const what = `${JSON.stringify(text)} parseSpecial=${parseSpecial}`;
            assert.deepEqual(tok.encode(text, { parseSpecial }), expected, what);
            const expectedText = model.detokenize(expected, parseSpecial);
            assert.equal(tok.decode(expected, { renderSpecial: parseSpecial }), expectedText, `decode ${what}`);
          }
        }
      } finally {
        await model.dispose();
      }
    });
  }
});
