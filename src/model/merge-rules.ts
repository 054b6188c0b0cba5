/**
 * The merge rules of llama.cpp's two sessions (merge-queue.ts runs them): BPE merges a pair by its rank, found by the
 * two tokens' ids; SentencePiece merges into a piece of the vocabulary by its score, found by the merged text. That
 * string lookup per candidate pair is cheap next to the rest (a 262,016-letter run of "ab" merges in ~0.15 µs a
 * letter), where a table by ids would be built at load from every split of every piece.
 */
import { assert } from '../util/assert.js';
import { type MergeRules, type MergeSymbols, PRIORITY_MAX } from './merge-queue.js';
import type { PairTable } from './pair-table.js';

export interface Merges {
  /** each merge's rank (its index in tokenizer.ggml.merges; a duplicated merge keeps its first) by its tokens' ids */
  ranks: PairTable;
  /** the token each rank's merge makes */
  results: Int32Array;
}

/** Byte-level characters (GPT-2's table) are all below U+0144: their ids come from an array, not a string lookup. */
const CHAR_IDS_COUNT = 0x200;

/** llama.cpp's BPE session: the lowest-ranked pair first, leftmost on ties; every merged symbol is a token. */
export class BpeRules implements MergeRules {
  private readonly charIds = new Int32Array(CHAR_IDS_COUNT);

  constructor(
    private readonly idOf: ReadonlyMap<string, number>,
    private readonly merges: Merges,
  ) {
    for (let unit = 0; unit < CHAR_IDS_COUNT; unit++) this.charIds[unit] = idOf.get(String.fromCharCode(unit)) ?? -1;
    assert(merges.results.length <= PRIORITY_MAX, 'more merges than merge priorities');
  }

  initialId(word: string, start: number, length: number): number {
    const unit = word.charCodeAt(start);
    if (length === 1 && unit < CHAR_IDS_COUNT) return this.charIds[unit]!;
    return this.idOf.get(word.slice(start, start + length)) ?? -1;
  }

  priorityOf(symbols: MergeSymbols, left: number, right: number): number {
    const a = symbols.id[left]!;
    const b = symbols.id[right]!;
    // ranks are unique to a pair of texts, as ids are to a text: the same order as llama.cpp's lookup of "left right"
    return a < 0 || b < 0 ? -1 : this.merges.ranks.get(a, b);
  }

  mergedId(_symbols: MergeSymbols, _left: number, rank: number): number {
    return this.merges.results[rank]!;
  }
}

/**
 * llama.cpp's SentencePiece session: the pair whose merged piece scores highest first, leftmost on ties (equal scores
 * share a priority). Ids are left to the caller's lookup of each final symbol's text.
 */
export class SpmRules implements MergeRules {
  private readonly scoreRanks: Int32Array;

  constructor(
    private readonly idOf: ReadonlyMap<string, number>,
    scores: Float32Array,
  ) {
    this.scoreRanks = scoreRanks(scores);
  }

  initialId(): number {
    return -1;
  }

  priorityOf(symbols: MergeSymbols, left: number, right: number): number {
    const end = left + symbols.length[left]! + symbols.length[right]!;
    const id = this.idOf.get(symbols.word.slice(left, end));
    return id === undefined ? -1 : this.scoreRanks[id]!;
  }

  mergedId(): number {
    return -1;
  }
}

/**
 * Each token's place among the distinct scores, highest first (-0 and 0 are one). A NaN score ranks last: llama.cpp's
 * comparison (and ours before ranks) has no order for it, so no id sequence was ever defined for such a file.
 */
function scoreRanks(scores: Float32Array): Int32Array {
  const ascending = Float32Array.from(scores).sort(); // NaN last
  const rankOf = new Map<number, number>(); // keys compare as SameValueZero: -0 is 0
  for (let i = ascending.length - 1; i >= 0; i--) {
    const score = ascending[i]!;
    if (!Number.isNaN(score) && !rankOf.has(score)) rankOf.set(score, rankOf.size);
  }
  const ranks = new Int32Array(scores.length);
  for (let id = 0; id < scores.length; id++) ranks[id] = rankOf.get(scores[id]!) ?? rankOf.size;
  assert(rankOf.size < PRIORITY_MAX, 'more distinct scores than merge priorities');
  return ranks;
}
