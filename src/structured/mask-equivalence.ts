/**
 * When two stacks below a string frame read every byte sequence alike, so the tokens that close the string may be
 * checked against one of them for both. A response format whose string positions are many parses at once (an array of
 * `anyOf` 64 strings that differ only in minLength or maxLength) has 64 string frames whose parents are 64 distinct
 * DFA states (the subset construction does not minimize: each `anyOf` branch returns to its own state), yet all alike:
 * checked stack by stack, a mask with Llama 3's 128k vocabulary walked ~575 closing tails 64 times, 12–20 ms on the
 * engine's thread for every tenant (DESIGN I11); grouped, it walks them once.
 *
 * Exact, never approximate: two frames are alike when their states are bisimilar (the same accepting flag, the same
 * byte ranges into alike states, the same rules called returning to alike states) and the frames below are alike; a
 * frame in a dead state (accepting, no way forward) is skipped, since reading a byte there goes on at once below it
 * and a tail is never empty. Anything the bounded checks cannot show alike counts as different (one more group, the
 * cost of before).
 *
 * Bounded per mask: the checks of one mask visit at most PAIRS_PER_MASK state pairs in all (`startMask`), and one
 * check at most PAIRS_MAX. A verdict is kept once found (a check past PAIRS_MAX is kept as "different" too), one cut
 * short by the mask's budget is not, so the next mask takes it up. Without the budget, 64 parses whose states are
 * alike only over 400-byte paths (an `anyOf` of 64 objects, each a string then the same long const) made every
 * string's first mask compare 2,016 pairs of states 256 pairs deep: 33–43 ms on the engine's thread each time, where
 * masking them one by one took ~1 ms (I11 review).
 */
import type { Grammar } from './grammar.js';
import type { Stack } from './grammar-stack.js';

/** state pairs one bisimulation check may visit before it gives up (answering "different") */
const PAIRS_MAX = 4096;
/** state pairs the checks of one mask may visit in all (~1 ms) */
export const PAIRS_PER_MASK = 16_384;
/** frames compared below a string frame before giving up */
const DEPTH_MAX = 16;
/** pair verdicts kept per grammar (cleared when full) */
const KNOWN_MAX = 16_384;

export class StateEquivalence {
  /** pair verdicts: key a * stateCount + b with a < b (exact in a double: states are at most LIMITS.grammarStatesMax) */
  private readonly known = new Map<number, boolean>();
  /** state pairs this mask's checks may still visit */
  private budget = PAIRS_PER_MASK;
  /** state pairs visited so far (for tests) */
  pairsVisited = 0;

  constructor(private readonly g: Grammar) {}

  /** A new mask: its checks get a fresh budget. */
  startMask(): void {
    this.budget = PAIRS_PER_MASK;
  }

  /** Whether the stacks read every non-empty byte sequence alike (false when unsure). */
  sameBelow(a: Stack, b: Stack): boolean {
    for (let depth = 0; depth < DEPTH_MAX; depth++) {
      a = this.below(a);
      b = this.below(b);
      if (a === b) return true;
      if (a === null || b === null || a.count !== b.count || !this.sameState(a.state, b.state)) return false;
      a = a.parent;
      b = b.parent;
    }
    return false;
  }

  /** The stack without its dead frames on top: it reads every non-empty byte sequence as the stack does. */
  below(s: Stack): Stack {
    while (s !== null && s.state >= 0 && this.g.dead[s.state] === 1) s = s.parent;
    return s;
  }

  /** Bisimilar DFA states (string states and BOUNDARY only as themselves). */
  sameState(a: number, b: number): boolean {
    if (a === b) return true;
    const key = a < b ? a * this.g.stateCount + b : b * this.g.stateCount + a;
    const known = this.known.get(key);
    if (known !== undefined) return known;
    const same = this.bisimilar(a, b);
    if (same === undefined) return false; // the mask's budget ran out: not known yet
    if (this.known.size >= KNOWN_MAX) this.known.clear();
    this.known.set(key, same);
    return same;
  }

  /**
   * Assumes the pair alike and follows every pair it leads to; alike when no pair differs locally (the pairs visited
   * then form a bisimulation). Ranges and calls are compared in their stored order, so states alike only up to a
   * different split of their ranges count as different. Undefined when the mask's budget runs out first.
   */
  private bisimilar(a0: number, b0: number): boolean | undefined {
    const g = this.g;
    if (this.budget <= 0) return undefined;
    this.budget--;
    this.pairsVisited++;
    const assumed = new Set<number>([a0 * g.stateCount + b0]);
    const todo = [a0, b0];
    let outOfBudget = false;
    const follow = (x: number, y: number): boolean => {
      if (x === y) return true;
      const key = x * g.stateCount + y;
      if (assumed.has(key)) return true;
      if (assumed.size >= PAIRS_MAX) return false;
      if (this.budget <= 0) {
        outOfBudget = true;
        return false;
      }
      this.budget--;
      this.pairsVisited++;
      assumed.add(key);
      todo.push(x, y);
      return true;
    };
    while (todo.length > 0) {
      const b = todo.pop()!;
      const a = todo.pop()!;
      if (a < 0 || b < 0 || g.stringOf[a]! >= 0 || g.stringOf[b]! >= 0) return false;
      if (g.accepting[a] !== g.accepting[b] || g.dead[a] !== g.dead[b]) return false;
      const ra = g.rangeStart[a]!;
      const rb = g.rangeStart[b]!;
      const ranges = g.rangeStart[a + 1]! - ra;
      if (g.rangeStart[b + 1]! - rb !== ranges) return false;
      for (let i = 0; i < ranges; i++) {
        if (g.rangeLo[ra + i] !== g.rangeLo[rb + i] || g.rangeHi[ra + i] !== g.rangeHi[rb + i]) return false;
        if (!follow(g.rangeTarget[ra + i]!, g.rangeTarget[rb + i]!)) return outOfBudget ? undefined : false;
      }
      const ca = g.callStart[a]!;
      const cb = g.callStart[b]!;
      const calls = g.callStart[a + 1]! - ca;
      if (g.callStart[b + 1]! - cb !== calls) return false;
      for (let i = 0; i < calls; i++) {
        if (g.callRule[ca + i] !== g.callRule[cb + i]) return false;
        if (!follow(g.callReturn[ca + i]!, g.callReturn[cb + i]!)) return outOfBudget ? undefined : false;
      }
    }
    return true;
  }
}
