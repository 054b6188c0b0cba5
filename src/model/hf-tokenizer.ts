/**
 * A Hugging Face `tokenizer.json` (and the `tokenizer_config.json` beside it, when there) as GGUF tokenizer metadata,
 * the way llama.cpp's convert_hf_to_gguf.py writes it, so that generated test models carry a real vocabulary:
 * - byte-level BPE (Llama 3, Qwen): `gpt2` model, merges, `tokenizer.ggml.pre` recognized from the split expression;
 * - SentencePiece exported as BPE with byte fallback (Llama 2, Gemma): `llama` model, pieces scored by their order
 *   (SentencePiece BPE lists pieces by merge priority), `<0xXX>` byte tokens, a leading space only when the
 *   normalizer prepends ▁.
 * Added tokens are control tokens when marked special or when they look special (convert_hf_to_gguf's
 * does_token_look_special), else user-defined; ids the file leaves unused become `[PAD<id>]`, as the converter does.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { GgufMetadata } from './gguf-types.js';
import { TOKEN_TYPE } from './tokenizer-vocab.js';

type Json = Record<string, unknown>;

const fail = (path: string, what: string) => new KvfenceError('invalid_argument', `${path}: ${what}`);

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function objectAt(o: Json, key: string): Json | undefined {
  const v = o[key];
  return isObject(v) ? v : undefined;
}

/** The special-token text of a tokenizer_config entry: a string or { content }. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (isObject(v) && typeof v.content === 'string') return v.content;
  return undefined;
}

/** convert_hf_to_gguf's does_token_look_special. */
function looksSpecial(text: string): boolean {
  return (
    ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(text) ||
    (text.startsWith('<|') && text.endsWith('|>')) ||
    (text.startsWith('<｜') && text.endsWith('｜>')) ||
    (text.startsWith('<unused') && text.endsWith('>'))
  );
}

/** llama.cpp's tokenizer.ggml.pre for the split expressions it knows by their digit rule. */
function preTokenizerOf(json: Json, path: string): string {
  const text = JSON.stringify(json.pre_tokenizer ?? null);
  if (text.includes('\\\\p{N}{1,3}')) return 'llama-bpe';
  if (text.includes('[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|')) return 'qwen2';
  throw fail(path, 'its pre-tokenizer is not one kvfence recognizes (Llama 3 or Qwen 2 split expressions)');
}

export interface HfVocabulary {
  metadata: GgufMetadata;
  vocabSize: number;
}

/** Reads `path` (a tokenizer.json) and the tokenizer_config.json beside it. */
export function readHfTokenizer(path: string): HfVocabulary {
  const json: unknown = JSON.parse(readFileSync(path, 'utf8'));
  let config: unknown = {};
  try {
    config = JSON.parse(readFileSync(join(dirname(path), 'tokenizer_config.json'), 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  if (!isObject(json) || !isObject(config)) throw fail(path, 'not a tokenizer.json object');
  return hfVocabulary(json, config, path);
}

export function hfVocabulary(json: Json, config: Json, path: string): HfVocabulary {
  const model = objectAt(json, 'model');
  if (model?.type !== 'BPE' || !isObject(model.vocab)) throw fail(path, 'only BPE tokenizer.json models are supported');
  const spm = model.byte_fallback === true;
  // every id below the largest becomes a token: an id is checked against the vocabulary limit before it sizes anything
  const checkedId = (id: unknown, what: string): number => {
    if (typeof id === 'number' && Number.isInteger(id) && id >= 0 && id < LIMITS.vocabSizeMax) return id;
    throw fail(
      path,
      `${what} has id ${id}, expected an integer from 0 below ${LIMITS.vocabSizeMax} (LIMITS.vocabSizeMax)`,
    );
  };
  const texts: (string | undefined)[] = [];
  const types: number[] = [];
  for (const [text, id] of Object.entries(model.vocab)) {
    const at = checkedId(id, `'${text}'`);
    texts[at] = text;
    types[at] = TOKEN_TYPE.normal;
  }
  const added = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  for (const [i, entry] of added.entries()) {
    if (!isObject(entry) || typeof entry.content !== 'string') throw fail(path, `added_tokens[${i}] has no content`);
    const at = checkedId(entry.id, `added token '${entry.content}'`);
    texts[at] = entry.content;
    types[at] = entry.special === true || looksSpecial(entry.content) ? TOKEN_TYPE.control : TOKEN_TYPE.userDefined;
  }
  const tokens: string[] = [];
  const tokenTypes: number[] = [];
  for (let id = 0; id < texts.length; id++) {
    const text = texts[id];
    tokens.push(text ?? `[PAD${id}]`);
    let type = text === undefined ? TOKEN_TYPE.unused : types[id]!;
    if (spm && type === TOKEN_TYPE.normal && /^<0x[0-9A-F]{2}>$/.test(text!)) type = TOKEN_TYPE.byte;
    if (spm && text === model.unk_token) type = TOKEN_TYPE.unknown;
    tokenTypes.push(type);
  }
  const idOf = new Map(tokens.map((t, id) => [t, id]));
  const meta: GgufMetadata = new Map();
  const u32 = (key: string, value: number) => meta.set(key, { type: 'u32', value });
  meta.set('tokenizer.ggml.model', { type: 'string', value: spm ? 'llama' : 'gpt2' });
  meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: tokenTypes });
  if (spm) {
    // SentencePiece BPE lists pieces by priority: a piece's score falls with its id, specials and bytes score 0
    const scores = tokenTypes.map((type, id) => (type === TOKEN_TYPE.normal ? -id : 0));
    meta.set('tokenizer.ggml.scores', { type: 'array', itemType: 'f32', value: scores });
    const normalizer = JSON.stringify(json.normalizer ?? null);
    meta.set('tokenizer.ggml.add_space_prefix', { type: 'bool', value: normalizer.includes('"Prepend"') });
  } else {
    meta.set('tokenizer.ggml.pre', { type: 'string', value: preTokenizerOf(json, path) });
    const merges = Array.isArray(model.merges) ? model.merges : [];
    const mergeTexts = merges.map((m) => (Array.isArray(m) ? m.join(' ') : String(m)));
    meta.set('tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: mergeTexts });
  }
  const special = (key: string, text: string | undefined) => {
    const id = text === undefined ? undefined : idOf.get(text);
    if (id !== undefined) u32(`tokenizer.ggml.${key}_token_id`, id);
  };
  special('bos', tokenText(config.bos_token));
  special('eos', tokenText(config.eos_token));
  special('padding', tokenText(config.pad_token));
  if (spm) special('unknown', typeof model.unk_token === 'string' ? model.unk_token : undefined);
  // BOS is added when the config says so, else when the post-processor template starts with a special token
  const template = JSON.stringify(objectAt(json, 'post_processor')?.single ?? null);
  const addBos = typeof config.add_bos_token === 'boolean' ? config.add_bos_token : template.startsWith('[{"Special');
  meta.set('tokenizer.ggml.add_bos_token', { type: 'bool', value: addBos && meta.has('tokenizer.ggml.bos_token_id') });
  meta.set('tokenizer.ggml.add_eos_token', { type: 'bool', value: config.add_eos_token === true });
  if (typeof config.chat_template === 'string') {
    meta.set('tokenizer.chat_template', { type: 'string', value: config.chat_template });
  }
  return { metadata: meta, vocabSize: tokens.length };
}
