/**
 * The merge loop shared by llama.cpp's BPE and SentencePiece sessions: symbols in a linked list, candidate pairs in a
 * priority queue, stale entries skipped.
 *
 * Typed arrays and numeric keys rather than an object per symbol and per queued pair with a comparator closure: words
 * are merged on the one tokenizer thread every tenant's prompts wait on (DESIGN I11), and one word of 262,016 '=' held
 * it for 2.1 µs a byte on Llama 3's vocabulary (~0.55 s; prose takes ~0.35 µs a character), now 0.44. A symbol takes
 * 20 bytes and a queued pair 8 (room for 2 a symbol), down from ~69 and ~68 bytes of objects.
 */
import { assert } from '../util/assert.js';
import type { Steps } from '../util/steps.js';

/**
 * A heap key is priority × UNITS_MAX + left symbol: lower priority first, then leftmost, in one comparison of exact
 * doubles. V8 strings are shorter than 2^29 units, and priorities are below PRIORITY_MAX: BPE ranks (merges are
 * metadata items, at most LIMITS.ggufMetadataItemsMax = 2^24), SentencePiece score ranks (LIMITS.vocabSizeMax = 2^20).
 */
const UNITS_MAX = 2 ** 29;
export const PRIORITY_MAX = 2 ** 24;
/** Words up to this many UTF-16 units reuse one set of arrays; a longer one allocates its own, freed with it. */
const REUSED_UNITS_MAX = 4096;
/** A long word's merge goes this many units of work between pauses: ~2–8 ms. */
const MERGE_STEP_UNITS = 16_384;

/** How a tokenizer merges, given the symbols of a word. */
export interface MergeRules {
  /** the token id of the one-character symbol [start, start + length) of the word, or -1 to look its text up later */
  initialId(word: string, start: number, length: number): number;
  /**
   * the priority (0 up to PRIORITY_MAX, lower first) of merging symbol `left` with the next one, `right`, or -1 when
   * they cannot merge
   */
  priorityOf(symbols: MergeSymbols, left: number, right: number): number;
  /** the token id of the symbol a merge of `priority` made at `left`, or -1 to look its text up later */
  mergedId(symbols: MergeSymbols, left: number, priority: number): number;
}

/**
 * The symbols of a word, indexed by the UTF-16 offset where each starts (the second unit of a surrogate pair is no
 * symbol's start and stays unused): a symbol absorbs the one after it, whose length drops to 0.
 */
export class MergeSymbols {
  word = '';
  readonly length: Int32Array;
  readonly prev: Int32Array;
  readonly next: Int32Array;
  /** token id, or -1 where the rules left it to be looked up by text */
  readonly id: Int32Array;
  /** the priority of merging the symbol with the next one as they are now, -1 when they cannot (or it has none) */
  private readonly pairPriority: Int32Array;
  /** candidate merges, as keys (see UNITS_MAX): one for each symbol's present pair, and stale ones */
  private readonly queue: PairQueue;
  /** where `step` is: setting up symbols, queueing their pairs, merging, or done */
  private stage: 'symbols' | 'pairs' | 'merges' | 'done' = 'done';
  /** the next unit to set up a symbol at, or the next symbol whose pair to queue (-1: none left) */
  private cursor = 0;
  /** the last symbol set up so far */
  private last = -1;
  private mergeCount = 0;

  constructor(readonly capacity: number) {
    this.length = new Int32Array(capacity);
    this.prev = new Int32Array(capacity);
    this.next = new Int32Array(capacity);
    this.id = new Int32Array(capacity);
    this.pairPriority = new Int32Array(capacity);
    // n - 1 keys at first, then per merge one popped and two pushed: at most n - 1 + (n - 1) merges
    this.queue = new PairQueue(2 * capacity);
  }

  /** the text of symbol `at` */
  text(at: number): string {
    return this.word.slice(at, at + this.length[at]!);
  }

  /**
   * Starts merging `word`: `step` then sets up one symbol per code point (so surrogate pairs stay whole), linked in
   * order, queues each pair that can merge, and merges.
   */
  start(word: string): void {
    assert(word.length <= this.capacity && word.length < UNITS_MAX, 'word longer than its symbols');
    this.word = word;
    this.queue.clear();
    this.stage = 'symbols';
    this.cursor = 0;
    this.last = -1;
    this.mergeCount = 0;
  }

  /** Merges the whole word at once. */
  merge(rules: MergeRules): void {
    while (!this.step(rules, Number.POSITIVE_INFINITY));
  }

  /**
   * Goes on with the merge for about `units` units of work (a symbol set up, a pair queued, a key taken from the
   * queue); true once the word is merged. A long word is merged a slice at a time this way, so that a thread merging
   * it can take turns with other work (encoder-thread.ts).
   */
  step(rules: MergeRules, units: number): boolean {
    let left = units;
    if (this.stage === 'symbols') {
      left = this.setUpSymbols(rules, left);
      if (this.stage === 'symbols') return false;
    }
    if (this.stage === 'pairs') {
      const { next } = this;
      let at = this.cursor;
      for (; at >= 0 && left > 0; at = next[at]!, left--) this.updatePair(at, rules);
      this.cursor = at;
      if (at >= 0) return false;
      this.stage = 'merges';
    }
    if (this.stage === 'merges') {
      this.mergeQueued(rules, left);
      if (this.queue.size > 0) return false;
      this.stage = 'done';
    }
    return true;
  }

  /** Sets up to `units` more symbols; what is left of `units`. */
  private setUpSymbols(rules: MergeRules, units: number): number {
    const { word, length, prev, next, id, pairPriority } = this;
    let left = units;
    let at = this.cursor;
    let last = this.last;
    for (; at < word.length && left > 0; left--) {
      const unit = word.charCodeAt(at);
      const pair = unit >= 0xd800 && unit <= 0xdbff && (word.charCodeAt(at + 1) & 0xfc00) === 0xdc00;
      const symbolLength = pair ? 2 : 1;
      length[at] = symbolLength;
      prev[at] = last;
      next[at] = -1;
      id[at] = rules.initialId(word, at, symbolLength);
      pairPriority[at] = -1;
      if (last >= 0) next[last] = at;
      last = at;
      at += symbolLength;
    }
    this.cursor = at;
    this.last = last;
    if (at >= word.length) {
      this.stage = 'pairs';
      this.cursor = word.length === 0 ? -1 : 0;
    }
    return left;
  }

  /** Records the priority of the pair starting at `left` as it is now, and queues it when it can merge. */
  private updatePair(left: number, rules: MergeRules): void {
    if (left < 0) return;
    const right = this.next[left]!;
    const priority = right < 0 ? -1 : rules.priorityOf(this, left, right);
    this.pairPriority[left] = priority;
    if (priority < 0) return;
    assert(priority < PRIORITY_MAX, 'merge priority past PRIORITY_MAX');
    this.queue.push(priority * UNITS_MAX + left);
  }

  /**
   * llama.cpp's merge loop, for up to `units` keys taken from the queue: repeatedly merge the best queued adjacent
   * pair, skipping stale entries. Each symbol's present pair has a key in the queue, so the smallest key that still is
   * its symbol's present pair's is the best merge. A stale key is one whose symbol was absorbed or has since paired
   * differently; when the new pair has the same priority (SentencePiece scores tie) the old key stands for it, which
   * merges the same pair at the same turn. llama.cpp (and this loop before) checks the pair's combined length instead,
   * the same test: lengths only grow.
   */
  private mergeQueued(rules: MergeRules, units: number): void {
    const { length, prev, next, id, pairPriority, queue } = this;
    const mergeCountMax = this.word.length; // each merge removes a symbol
    for (let left = units; queue.size > 0 && left > 0; left--) {
      const key = queue.pop();
      const at = key % UNITS_MAX;
      const priority = (key - at) / UNITS_MAX;
      if (pairPriority[at] !== priority) continue;
      assert(++this.mergeCount < mergeCountMax, 'more merges than symbols');
      const right = next[at]!;
      const after = next[right]!;
      length[at]! += length[right]!;
      length[right] = 0;
      pairPriority[right] = -1;
      next[at] = after;
      if (after >= 0) prev[after] = at;
      id[at] = rules.mergedId(this, at, priority);
      this.updatePair(prev[at]!, rules);
      this.updatePair(at, rules);
    }
  }
}

/**
 * A min-heap of keys. Four children a node, and a pop that carries the hole down to a leaf before placing the last key
 * (Floyd's): a long word's queue outgrows the caches, and half the levels of a binary heap made the merge of 262,016
 * '=' ~7% faster.
 */
class PairQueue {
  private readonly keys: Float64Array;
  size = 0;

  constructor(capacity: number) {
    this.keys = new Float64Array(capacity);
  }

  clear(): void {
    this.size = 0;
  }

  push(key: number): void {
    assert(this.size < this.keys.length, 'more queued pairs than room');
    this.siftUp(this.size++, key);
  }

  /** removes and returns the smallest key */
  pop(): number {
    assert(this.size > 0, 'pop from an empty queue');
    const keys = this.keys;
    const top = keys[0]!;
    const size = --this.size;
    let hole = 0;
    for (let first = 1; first < size; first = 4 * hole + 1) {
      let best = first;
      const end = Math.min(first + 4, size);
      for (let child = first + 1; child < end; child++) if (keys[child]! < keys[best]!) best = child;
      keys[hole] = keys[best]!;
      hole = best;
    }
    this.siftUp(hole, keys[size]!);
    return top;
  }

  /** places the key at `hole` or above it, moving larger parents down */
  private siftUp(hole: number, key: number): void {
    const keys = this.keys;
    let i = hole;
    while (i > 0) {
      const parent = (i - 1) >> 2;
      if (keys[parent]! <= key) break;
      keys[i] = keys[parent]!;
      i = parent;
    }
    keys[i] = key;
  }
}

/**
 * Symbols for merging a word, reusing one set of arrays for words up to REUSED_UNITS_MAX units (a word of prose is a
 * few letters: allocating typed arrays for each cost more than merging it).
 */
export class MergeScratch {
  private reused: MergeSymbols | undefined;

  /**
   * The word's symbols, merged: a word within REUSED_UNITS_MAX at once, in the reused arrays (read them before the
   * next call), a longer one in arrays of its own, MERGE_STEP_UNITS of work at a time with a pause (`yield`) after
   * each (a word of 16 million spaces took ~8 s to merge).
   */
  *merged(word: string, rules: MergeRules): Steps<MergeSymbols> {
    if (word.length > REUSED_UNITS_MAX) {
      const symbols = new MergeSymbols(word.length);
      symbols.start(word);
      while (!symbols.step(rules, MERGE_STEP_UNITS)) yield;
      return symbols;
    }
    if (this.reused === undefined || this.reused.capacity < word.length) {
      this.reused = new MergeSymbols(Math.min(REUSED_UNITS_MAX, Math.max(64, 2 * word.length)));
    }
    this.reused.start(word);
    this.reused.merge(rules);
    return this.reused;
  }
}
