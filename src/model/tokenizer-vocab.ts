/**
 * The vocabulary part of a GGUF tokenizer: token texts, types (as llama.cpp's attribute bits), scores, merges and the
 * special ids, read and validated from metadata. End-of-generation tokens are also recognized by name, as llama.cpp does.
 */
import { KvfenceError } from '../util/errors.js';
import { type GgufMetadata, metaNumber, metaNumberArray, metaStringArray } from './gguf-types.js';
import type { Merges } from './merge-rules.js';
import { PairTable } from './pair-table.js';

export const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

// llama.cpp's llama_token_attr bits: a token may gain CONTROL on top of its type (see EOG_BY_NAME).
export const ATTR_UNKNOWN = 1;
const ATTR_UNUSED = 2;
export const ATTR_NORMAL = 4;
export const ATTR_CONTROL = 8;
export const ATTR_USER_DEFINED = 16;
export const ATTR_BYTE = 32;
const ATTR_BY_TYPE: Readonly<Record<number, number>> = {
  1: ATTR_NORMAL,
  2: ATTR_UNKNOWN,
  3: ATTR_CONTROL,
  4: ATTR_USER_DEFINED,
  5: ATTR_UNUSED,
  6: ATTR_BYTE,
};

/** Token texts llama.cpp treats as end of generation whatever their type (and marks as control). */
export const EOG_BY_NAME: ReadonlySet<string> = new Set([
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<|return|>',
  '<|call|>',
  '<|flush|>',
  '<|calls|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '</s>',
  '<|eom_id|>',
  '<EOT>',
  '_<EOT>',
  '[EOT]',
  '[EOS]',
  '<|end_of_text|>',
  '<end_of_utterance>',
  '<eos>',
  '<turn|>',
  '<|tool_response>',
  '<｜end▁of▁sentence｜>',
  '[e~[',
]);
/** Fill-in-the-middle pad/repo/separator tokens: llama.cpp makes them control and end of generation. */
export const FIM_EOG_BY_NAME: ReadonlySet<string> = new Set([
  '<|fim_pad|>',
  '<fim-pad>',
  '<fim_pad>',
  '<PAD>',
  '[PAD]',
  '<|fim_repo|>',
  '<|repo_name|>',
  '<fim-repo>',
  '<REPO>',
  '<reponame>',
  '<|file_sep|>',
]);

export interface Vocabulary {
  texts: string[];
  attrs: Uint8Array;
  scores: Float32Array;
  idOf: Map<string, number>;
}

export type TokenizerModel = 'gpt2' | 'llama';

export function invalid(message: string): KvfenceError {
  return new KvfenceError('invalid_model_file', message);
}

export function readVocabulary(meta: GgufMetadata): Vocabulary {
  const texts = metaStringArray(meta, 'tokenizer.ggml.tokens');
  if (texts === undefined || texts.length === 0) throw invalid('tokenizer.ggml.tokens is missing or empty');
  const count = texts.length;
  const types = metaNumberArray(meta, 'tokenizer.ggml.token_type');
  if (types !== undefined && types.length < count) {
    throw invalid(`tokenizer.ggml.token_type has ${types.length} entries for ${count} tokens`);
  }
  const scoreList = metaNumberArray(meta, 'tokenizer.ggml.scores');
  if (scoreList !== undefined && scoreList.length < count) {
    throw invalid(`tokenizer.ggml.scores has ${scoreList.length} entries for ${count} tokens`);
  }
  const attrs = new Uint8Array(count);
  const scores = new Float32Array(count);
  const idOf = new Map<string, number>();
  const fixedTexts: string[] = new Array(count);
  for (let id = 0; id < count; id++) {
    const text = texts[id] === '' ? `[EMPTY_${id}]` : texts[id]; // llama.cpp's name for empty tokens
    if (idOf.has(text)) throw invalid(`tokenizer.ggml.tokens has '${text}' twice (ids ${idOf.get(text)} and ${id})`);
    idOf.set(text, id);
    fixedTexts[id] = text;
    attrs[id] = types === undefined ? ATTR_NORMAL : (ATTR_BY_TYPE[types[id]] ?? 0);
    scores[id] = scoreList?.[id] ?? 0;
    if (EOG_BY_NAME.has(text) || FIM_EOG_BY_NAME.has(text)) attrs[id] |= ATTR_CONTROL;
  }
  return { texts: fixedTexts, attrs, scores, idOf };
}

/**
 * Merge ranks by the ids of the two tokens merged. Parts are split at the first space after the first character:
 * llama.cpp requires merge parts to hold no space (find_bpe_rank asserts it). The first occurrence of a pair wins, as
 * with llama.cpp's map emplace. Every part and every merged text must be a token, so merged symbols always have ids.
 */
export function readMerges(meta: GgufMetadata, vocab: Vocabulary): Merges {
  const merges = metaStringArray(meta, 'tokenizer.ggml.merges');
  if (merges === undefined) throw invalid('tokenizer.ggml.merges is missing (required for a gpt2 tokenizer)');
  const ranks = new PairTable(merges.length);
  const results = new Int32Array(merges.length);
  for (let rank = 0; rank < merges.length; rank++) {
    const merge = merges[rank];
    const split = merge.indexOf(' ', 1);
    const left = merge.slice(0, split);
    const right = merge.slice(split + 1);
    const leftId = vocab.idOf.get(left);
    const rightId = vocab.idOf.get(right);
    if (split < 0 || right.includes(' ') || leftId === undefined || rightId === undefined) {
      throw invalid(`tokenizer.ggml.merges[${rank}] '${merge}' refers to tokens not in the vocabulary`);
    }
    const result = vocab.idOf.get(left + right);
    if (result === undefined) {
      throw invalid(`tokenizer.ggml.merges[${rank}] '${merge}' makes a token not in the vocabulary`);
    }
    ranks.addIfAbsent(leftId, rightId, rank);
    results[rank] = result;
  }
  return { ranks, results };
}

/** An id from metadata if present (must be in range), else llama.cpp's default for the model if that is in range. */
export function specialId(
  meta: GgufMetadata,
  key: string,
  fallback: number | undefined,
  count: number,
): number | undefined {
  const id = metaNumber(meta, `tokenizer.ggml.${key}`);
  if (id !== undefined) {
    if (!Number.isInteger(id) || id < 0 || id >= count) {
      throw invalid(`tokenizer.ggml.${key} is ${id}, outside the vocabulary of ${count} tokens`);
    }
    return id;
  }
  return fallback !== undefined && fallback < count ? fallback : undefined;
}
