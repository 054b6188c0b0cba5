/**
 * The model `bench:serve` runs on both servers: SmolLM2-135M's shape in f16 with random weights, as `npm run bench`'s
 * 135m-f16, but with a vocabulary whose tokens are printable text. llama-server parses every completion's text, raw
 * /v1/completions included, with its chat output parser, and that parser fails a stream (HTTP 500 "does not match the
 * expected Content-only format") at the first byte that is not valid UTF-8; the generated test vocabularies' filler
 * merges join random byte pairs, so 44,585 of the 49,152 tokens of the usual 135m model are not valid UTF-8 alone and
 * random weights emit them. No server option turns that parser off (--skip-chat-parsing, --no-jinja,
 * --reasoning-format none: each still fails), so the vocabulary has to change: here every merged token is 2 or 3
 * printable ASCII characters. The 256 byte tokens (byte-level BPE needs them) and the 3 special tokens stay; the
 * requests ban the byte tokens that are not printable and the specials with `logit_bias`, the same on both servers.
 */
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeGguf } from '../src/model/gguf-write.js';
import { BYTE_TO_CHAR } from '../src/model/pretokenizer.js';
import { makeTestModel, TEST_PRESETS } from '../src/model/test-model.js';

/** Llama 3's split expression: one that kvfence and llama.cpp both recognize (tokenizer.ggml.pre = llama-bpe). */
const LLAMA3_PRE_TOKENIZER = {
  type: 'Sequence',
  pretokenizers: [
    {
      type: 'Split',
      pattern: {
        Regex:
          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      },
      behavior: 'Isolated',
      invert: false,
    },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
};
const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
/** bumped when the vocabulary or the file changes, so a stale cached file is never used */
const FORMAT = 1;

export interface ServeModel {
  path: string;
  vocabSize: number;
  /** the byte tokens that are not printable ASCII, and the specials: every request bans them */
  bannedTokenIds: number[];
  /** the merged tokens (2 or 3 printable characters): prompts are drawn from them */
  firstTextId: number;
  lastTextId: number;
}

const isPrintable = (byte: number) => byte >= 0x20 && byte < 0x7f;

/** Byte-level BPE over printable ASCII: every pair of printable characters, then triples until the vocabulary is full. */
function tokenizerJson(vocabSize: number): object {
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[BYTE_TO_CHAR[b]!] = b;
  const printable = BYTE_TO_CHAR.filter((_, b) => isPrintable(b));
  const merges: string[] = [];
  const textSlots = vocabSize - 256 - SPECIALS.length;
  const add = (left: string, right: string) => {
    if (merges.length === textSlots) return;
    vocab[left + right] = 256 + merges.length;
    merges.push(`${left} ${right}`);
  };
  for (const a of printable) for (const b of printable) add(a, b);
  for (const a of printable) for (const b of printable) for (const c of printable) add(a + b, c);
  const added = SPECIALS.map((content, i) => ({ id: 256 + textSlots + i, content, special: true }));
  return {
    model: { type: 'BPE', byte_fallback: false, vocab, merges },
    added_tokens: added,
    pre_tokenizer: LLAMA3_PRE_TOKENIZER,
  };
}

/** Path and token sets of the bench model, generating it into `directory` (seconds) unless it is already there. */
export function ensureServeModel(directory: string): ServeModel {
  const vocabSize = TEST_PRESETS['135m'].vocabSize;
  const textCount = vocabSize - 256 - SPECIALS.length;
  const banned = [
    ...Array.from({ length: 256 }, (_, b) => b).filter((b) => !isPrintable(b)),
    ...SPECIALS.map((_, i) => 256 + textCount + i),
  ];
  const model: ServeModel = {
    path: join(directory, `serve-135m-llama-f16-printable-s1-v${FORMAT}.gguf`),
    vocabSize,
    bannedTokenIds: banned,
    firstTextId: 256,
    lastTextId: 256 + textCount - 1,
  };
  if (existsSync(model.path)) return model;
  const vocabDir = join(directory, `serve-vocab-v${FORMAT}`);
  mkdirSync(vocabDir, { recursive: true });
  const tokenizerPath = join(vocabDir, 'tokenizer.json');
  writeFileSync(tokenizerPath, JSON.stringify(tokenizerJson(vocabSize)));
  writeFileSync(
    join(vocabDir, 'tokenizer_config.json'),
    JSON.stringify({ bos_token: SPECIALS[0], eos_token: SPECIALS[0], add_bos_token: false }),
  );
  const made = makeTestModel({ preset: '135m', arch: 'llama', dtype: 'f16', seed: 1, hfTokenizer: tokenizerPath });
  const partial = `${model.path}.${process.pid}.partial`;
  writeGguf(partial, made.metadata, made.tensors);
  renameSync(partial, model.path); // atomic: a concurrent reader sees the whole file or none
  return model;
}
