/**
 * A map from pairs of token ids to a number, in flat typed arrays (open addressing, linear probes, at most half full):
 * BPE merge ranks by the ids of the two tokens merged. Keyed by ids rather than by the text "left right", a lookup in
 * the merge loop builds and hashes no string. Llama 3's 280,147 merges take 13.7 MB with their results, about what the
 * Map of strings it replaces took (14.7 MB).
 */
import { assert } from '../util/assert.js';

const EMPTY = -1;

export class PairTable {
  /** slot i holds the pair (keys[2i], keys[2i + 1]) and its value; keys[2i] is EMPTY in a free slot */
  private readonly keys: Int32Array;
  private readonly values: Int32Array;
  private readonly mask: number;
  private count = 0;

  /** room for `capacity` pairs, at most half full (short probes) */
  constructor(capacity: number) {
    assert(Number.isInteger(capacity) && capacity >= 0 && capacity <= 2 ** 28, `pair table capacity ${capacity}`);
    let slots = 16;
    while (slots < 2 * capacity) slots *= 2;
    this.keys = new Int32Array(2 * slots).fill(EMPTY);
    this.values = new Int32Array(slots);
    this.mask = slots - 1;
  }

  /** the value of the pair, or -1 when absent; ids are non-negative */
  get(left: number, right: number): number {
    const { keys, mask } = this;
    // at most half the slots are taken, so a probe meets a free one long before it has seen them all
    for (let probe = 0, slot = hash(left, right) & mask; probe <= mask; probe++, slot = (slot + 1) & mask) {
      const k = keys[2 * slot]!;
      if (k === EMPTY) return -1;
      if (k === left && keys[2 * slot + 1] === right) return this.values[slot]!;
    }
    return -1;
  }

  /** sets the pair's value unless it has one already (the first of duplicated merges keeps its rank, as llama.cpp) */
  addIfAbsent(left: number, right: number, value: number): void {
    assert(left >= 0 && right >= 0, 'pair ids are non-negative');
    const { keys, mask } = this;
    assert(2 * (this.count + 1) <= mask + 1, 'pair table over capacity');
    for (let probe = 0, slot = hash(left, right) & mask; probe <= mask; probe++, slot = (slot + 1) & mask) {
      const k = keys[2 * slot]!;
      if (k === left && keys[2 * slot + 1] === right) return;
      if (k === EMPTY) {
        this.count++;
        keys[2 * slot] = left;
        keys[2 * slot + 1] = right;
        this.values[slot] = value;
        return;
      }
    }
    assert(false, 'pair table has no free slot');
  }
}

/** a 32-bit mix of the two ids (multiplicative, then the high bits folded down, which the mask would drop) */
function hash(left: number, right: number): number {
  const h = Math.imul(left, 0x9e3779b1) ^ Math.imul(right + 0x7f4a7c15, 0x85ebca77);
  return (h ^ (h >>> 15)) >>> 0;
}
