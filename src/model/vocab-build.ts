/**
 * Deterministic, real vocabularies for generated test models: BPE merges learned from an embedded corpus (corpus.ts),
 * then seeded filler merges of existing token pairs until the requested size, so that even 49152 tokens are a valid,
 * consistent vocabulary that llama.cpp loads and tokenizes with. The learned part does not depend on the seed (the
 * corpus is fixed); the filler does.
 *
 * gpt2 kind (SmolLM2 / Qwen2 style): [256 byte characters | merges | <|endoftext|> <|im_start|> <|im_end|>], ChatML.
 * llama kind (Llama 2 style): [<unk> <s> </s> | <0x00>…<0xFF> | merged pieces by score | single characters], [INST].
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { SeededRandom } from '../util/random.js';
import { TRAINING_CORPUS } from './corpus.js';
import type { GgufMetadata } from './gguf-types.js';
import { BYTE_TO_CHAR, byteLevelEncode, type PreTokenizerName, preTokenize } from './pretokenizer.js';
import { TOKEN_TYPE } from './tokenizer-vocab.js';

export type TestTokenizerKind = 'gpt2' | 'llama';
export type TestPreTokenizer = Exclude<PreTokenizerName, 'default'>;

export interface TestVocabOptions {
  kind: TestTokenizerKind;
  /** pre-tokenizer of the gpt2 kind (the llama kind has none) */
  pre: TestPreTokenizer;
  /** exact total token count */
  vocabSize: number;
  seed: number;
}

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Llama 2 chat's template: system prompt folded into the first user turn, roles must alternate. */
export const LLAMA2_TEMPLATE =
  "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}" +
  "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}" +
  '{% set system_message = false %}{% endif %}{% for message in loop_messages %}' +
  "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + " +
  "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}" +
  "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}" +
  "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

const GPT2_SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;
const LLAMA_SPECIALS = ['<unk>', '<s>', '</s>'] as const;
const SPM_SPACE = '\u2581';
/** Learned merges stop here even if the corpus has more; the rest is filler. Keeps building well under a second. */
const LEARNED_TOKEN_COUNT_MAX = 4000;
const FILLER_TOKEN_LENGTH_MAX = 16;
const FILLER_ATTEMPTS_MAX = 1000;

interface TrainingWord {
  symbols: string[];
  count: number;
}

interface MergeList {
  merges: [string, string][];
  /** tokens the merges created, in order (a merge whose result already exists creates none) */
  created: string[];
}

const SEPARATOR = '\u0000'; // never inside a token of these vocabularies

/** BPE training with incremental pair counts: merge the most frequent pair (ties: smallest pair text) until done. */
function learnMerges(words: TrainingWord[], createdMax: number, taken: Set<string>): MergeList {
  const pairCounts = new Map<string, number>();
  const pairWords = new Map<string, Set<number>>();
  const countPairs = (w: number, sign: 1 | -1) => {
    const { symbols, count } = words[w];
    for (let i = 1; i < symbols.length; i++) {
      const key = symbols[i - 1] + SEPARATOR + symbols[i];
      const total = (pairCounts.get(key) ?? 0) + sign * count;
      if (total === 0) pairCounts.delete(key);
      else pairCounts.set(key, total);
      if (sign > 0) {
        const set = pairWords.get(key) ?? new Set<number>();
        pairWords.set(key, set);
        set.add(w);
      }
    }
  };
  for (let w = 0; w < words.length; w++) countPairs(w, 1);
  const result: MergeList = { merges: [], created: [] };
  while (result.created.length < createdMax) {
    let bestKey: string | undefined;
    let bestCount = 1; // a pair seen once teaches nothing
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && bestKey !== undefined && key < bestKey)) {
        bestKey = key;
        bestCount = count;
      }
    }
    if (bestKey === undefined) break;
    const [left, right] = bestKey.split(SEPARATOR) as [string, string];
    const merged = left + right;
    result.merges.push([left, right]);
    if (!taken.has(merged)) {
      taken.add(merged);
      result.created.push(merged);
    }
    for (const w of pairWords.get(bestKey) ?? []) {
      countPairs(w, -1);
      const symbols = words[w].symbols;
      const next: string[] = [];
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
          next.push(merged);
          i++;
        } else {
          next.push(symbols[i]);
        }
      }
      words[w].symbols = next;
      countPairs(w, 1);
    }
  }
  return result;
}

/**
 * Seeded merges of existing token pairs, each making a new token of at most FILLER_TOKEN_LENGTH_MAX characters. The
 * right side is usually a base symbol, so tokens grow a character at a time as real BPE vocabularies do.
 */
function fillerMerges(
  base: readonly string[],
  pool: string[],
  count: number,
  taken: Set<string>,
  random: SeededRandom,
  rightAllowed: (token: string) => boolean,
): MergeList {
  const result: MergeList = { merges: [], created: [] };
  for (let n = 0; n < count; n++) {
    let made = false;
    for (let attempt = 0; attempt < FILLER_ATTEMPTS_MAX && !made; attempt++) {
      const left = pool[random.nextInt(pool.length)];
      const right = random.nextInt(4) === 0 ? pool[random.nextInt(pool.length)] : base[random.nextInt(base.length)];
      if (left.length + right.length > FILLER_TOKEN_LENGTH_MAX || !rightAllowed(right)) continue;
      const merged = left + right;
      if (taken.has(merged)) continue;
      taken.add(merged);
      pool.push(merged);
      result.merges.push([left, right]);
      result.created.push(merged);
      made = true;
    }
    assert(made, `no new filler token after ${FILLER_ATTEMPTS_MAX} attempts`);
  }
  return result;
}

function countWords(words: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
  return counts;
}

function buildGpt2(options: TestVocabOptions, random: SeededRandom): GgufMetadata {
  // GPT-2's order: printable bytes first, then the remapped ones
  const bytes = [...BYTE_TO_CHAR].sort((a, b) => a.charCodeAt(0) - b.charCodeAt(0));
  const mergeRoom = options.vocabSize - bytes.length - GPT2_SPECIALS.length;
  if (mergeRoom < 0) {
    throw new KvfenceError('invalid_argument', `a gpt2 test vocabulary needs at least ${bytes.length + 3} tokens`);
  }
  const taken = new Set<string>([...bytes, ...GPT2_SPECIALS]);
  const words = [...countWords(preTokenize(TRAINING_CORPUS, options.pre))].map(([word, count]) => ({
    symbols: Array.from(byteLevelEncode(word)),
    count,
  }));
  const learned = learnMerges(words, Math.min(mergeRoom, LEARNED_TOKEN_COUNT_MAX), taken);
  const pool = [...bytes, ...learned.created];
  const filler = fillerMerges(bytes, pool, mergeRoom - learned.created.length, taken, random, () => true);
  const tokens = [...bytes, ...learned.created, ...filler.created, ...GPT2_SPECIALS];
  assert(tokens.length === options.vocabSize, 'gpt2 vocabulary size');
  const idOf = (text: string) => tokens.indexOf(text, tokens.length - GPT2_SPECIALS.length);
  const types = tokens.map((_, id) =>
    id >= tokens.length - GPT2_SPECIALS.length ? TOKEN_TYPE.control : TOKEN_TYPE.normal,
  );
  const meta: GgufMetadata = new Map();
  meta.set('tokenizer.ggml.model', { type: 'string', value: 'gpt2' });
  meta.set('tokenizer.ggml.pre', { type: 'string', value: options.pre });
  meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
  const mergeTexts = [...learned.merges, ...filler.merges].map(([l, r]) => `${l} ${r}`);
  meta.set('tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: mergeTexts });
  // Qwen2-Instruct's choice: BOS is <|endoftext|> (never added), generation ends at <|im_end|>
  meta.set('tokenizer.ggml.bos_token_id', { type: 'u32', value: idOf('<|endoftext|>') });
  meta.set('tokenizer.ggml.eos_token_id', { type: 'u32', value: idOf('<|im_end|>') });
  meta.set('tokenizer.ggml.padding_token_id', { type: 'u32', value: idOf('<|endoftext|>') });
  meta.set('tokenizer.ggml.add_bos_token', { type: 'bool', value: false });
  meta.set('tokenizer.ggml.add_eos_token', { type: 'bool', value: false });
  meta.set('tokenizer.chat_template', { type: 'string', value: CHATML_TEMPLATE });
  return meta;
}

function buildLlama(options: TestVocabOptions, random: SeededRandom): GgufMetadata {
  const byteTokens = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  // SentencePiece sees words as ▁word; whitespace other than spaces (newlines, tabs) is left to byte fallback
  const words = [...countWords(TRAINING_CORPUS.split(/\s+/).filter((w) => w !== ''))].map(([word, count]) => ({
    symbols: Array.from(SPM_SPACE + word),
    count,
  }));
  const charCounts = new Map<string, number>();
  for (const { symbols, count } of words)
    for (const ch of symbols) charCounts.set(ch, (charCounts.get(ch) ?? 0) + count);
  const chars = [...charCounts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([ch]) => ch);
  const fixedCount = LLAMA_SPECIALS.length + byteTokens.length + chars.length;
  const mergeRoom = options.vocabSize - fixedCount;
  if (mergeRoom < 0) {
    throw new KvfenceError('invalid_argument', `a llama test vocabulary needs at least ${fixedCount} tokens`);
  }
  const taken = new Set<string>([...LLAMA_SPECIALS, ...byteTokens, ...chars]);
  const learned = learnMerges(words, Math.min(mergeRoom, LEARNED_TOKEN_COUNT_MAX), taken);
  const pool = [...chars, ...learned.created];
  const wordInternal = (piece: string) => !piece.startsWith(SPM_SPACE);
  const filler = fillerMerges(chars, pool, mergeRoom - learned.created.length, taken, random, wordInternal);
  const pieces = [...learned.created, ...filler.created, ...chars];
  const tokens = [...LLAMA_SPECIALS, ...byteTokens, ...pieces];
  assert(tokens.length === options.vocabSize, 'llama vocabulary size');
  const pieceStart = LLAMA_SPECIALS.length + byteTokens.length;
  // llama.cpp merges the adjacent pair whose merged piece scores highest: earlier pieces score higher
  const scores = tokens.map((_, id) => (id < pieceStart ? 0 : -(id - pieceStart)));
  const types = tokens.map((_, id) => {
    if (id === 0) return TOKEN_TYPE.unknown;
    if (id < LLAMA_SPECIALS.length) return TOKEN_TYPE.control;
    return id < pieceStart ? TOKEN_TYPE.byte : TOKEN_TYPE.normal;
  });
  const meta: GgufMetadata = new Map();
  meta.set('tokenizer.ggml.model', { type: 'string', value: 'llama' });
  meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
  meta.set('tokenizer.ggml.scores', { type: 'array', itemType: 'f32', value: scores });
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
  meta.set('tokenizer.ggml.bos_token_id', { type: 'u32', value: 1 });
  meta.set('tokenizer.ggml.eos_token_id', { type: 'u32', value: 2 });
  meta.set('tokenizer.ggml.unknown_token_id', { type: 'u32', value: 0 });
  meta.set('tokenizer.ggml.add_bos_token', { type: 'bool', value: true });
  meta.set('tokenizer.ggml.add_eos_token', { type: 'bool', value: false });
  meta.set('tokenizer.chat_template', { type: 'string', value: LLAMA2_TEMPLATE });
  return meta;
}

/** Returns the tokenizer.* GGUF metadata entries of a test vocabulary; same options → identical entries. */
export function buildTestVocabulary(options: TestVocabOptions): GgufMetadata {
  if (!Number.isInteger(options.vocabSize) || options.vocabSize <= 0) {
    throw new KvfenceError('invalid_argument', `vocabSize must be a positive integer, got ${options.vocabSize}`);
  }
  const random = new SeededRandom(options.seed);
  return options.kind === 'gpt2' ? buildGpt2(options, random) : buildLlama(options, random);
}
