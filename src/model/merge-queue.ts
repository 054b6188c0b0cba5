/**
 * The merge loop shared by llama.cpp's BPE and SentencePiece sessions: symbols in a linked list, candidate pairs in a
 * priority queue, stale entries skipped.
 */
import { assert } from '../util/assert.js';

/** Min-heap over an array; `before(a, b)` is true when a must come out first. */
class Heap<T> {
  private readonly items: T[] = [];
  constructor(private readonly before: (a: T, b: T) => boolean) {}
  get size(): number {
    return this.items.length;
  }
  push(item: T): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }
  pop(): T {
    const items = this.items;
    assert(items.length > 0, 'pop from an empty heap');
    const top = items[0];
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < items.length && this.before(items[l], items[best])) best = l;
        if (r < items.length && this.before(items[r], items[best])) best = r;
        if (best === i) break;
        [items[i], items[best]] = [items[best], items[i]];
        i = best;
      }
    }
    return top;
  }
}

/** A run of the word being merged: [start, start + length) of its string, linked to its live neighbours. */
interface MergeSymbol {
  start: number;
  length: number;
  prev: number;
  next: number;
}

interface Bigram {
  left: number;
  right: number;
  /** BPE: merge rank (lower first); SentencePiece: merged piece score (higher first) */
  priority: number;
  /** combined length when queued; a later mismatch means one side has changed since */
  length: number;
}

/** One character per symbol (code points, so surrogate pairs stay whole), linked in order. */
export function initialSymbols(word: string): MergeSymbol[] {
  const symbols: MergeSymbol[] = [];
  let start = 0;
  for (const ch of word) {
    symbols.push({ start, length: ch.length, prev: symbols.length - 1, next: symbols.length + 1 });
    start += ch.length;
  }
  if (symbols.length > 0) symbols[symbols.length - 1].next = -1;
  return symbols;
}

/**
 * The shared merge loop of llama.cpp's BPE and SPM sessions: repeatedly merge the best queued adjacent pair, skipping
 * entries made stale by earlier merges. `priorityOf` gives a pair's priority or undefined when it cannot merge.
 */
export function mergeSymbols(
  word: string,
  symbols: MergeSymbol[],
  priorityOf: (text: string, left: string, right: string) => number | undefined,
  before: (a: Bigram, b: Bigram) => boolean,
): void {
  const queue = new Heap<Bigram>(before);
  const tryAdd = (left: number, right: number) => {
    if (left < 0 || right < 0) return;
    const a = symbols[left];
    const b = symbols[right];
    const text = word.slice(a.start, a.start + a.length + b.length);
    const priority = priorityOf(text, text.slice(0, a.length), text.slice(a.length));
    if (priority !== undefined) queue.push({ left, right, priority, length: a.length + b.length });
  };
  for (let i = 1; i < symbols.length; i++) tryAdd(i - 1, i);
  const mergeCountMax = symbols.length; // each merge removes a symbol
  let mergeCount = 0;
  while (queue.size > 0) {
    const bigram = queue.pop();
    const left = symbols[bigram.left];
    const right = symbols[bigram.right];
    if (left.length === 0 || right.length === 0 || left.length + right.length !== bigram.length) continue;
    assert(++mergeCount < mergeCountMax, 'more merges than symbols');
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    tryAdd(left.prev, bigram.left);
    tryAdd(bigram.left, left.next);
  }
}
