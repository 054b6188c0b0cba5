/**
 * The tokens a position's string frames allow (one frame per parse whose top is inside a string):
 *   - those that stay inside: they depend only on the sub-state and the characters left, so each sub-state ORs its
 *     scan's bitset once with the most room any of its frames has (a word at a time while the longest token fits,
 *     else the largest bitset of shorter ones that fits and the rest that fit one by one);
 *   - those that close a string: a frame's closing tokens are those of a character count within its bounds whose
 *     tail after the quote the stack below reads. Frames in one sub-state whose stacks below read alike
 *     (mask-equivalence.ts) are one group: one pass over the closing tokens with the union of their bounds, against
 *     the tails' verdicts for one of them.
 * Tail verdicts are one walk over the scan's tail trie (tail-verdicts.ts), kept per frame below: while a string is
 * written that frame stays the same object, so from a string's second token on a mask only looks them up.
 *
 * Measured with Llama 3's 128k vocabulary (fillMask alone along random walks, before and after in turn in one process),
 * p50 / p90 a mask: an array of `anyOf` 64 strings that differ in minLength (64 parses at every string position, alike
 * below) 17.4 / 19.7 ms → 0.09 / 0.10 ms; in maxLength 100–163 18.0 / 24.7 → 0.09 / 0.14 ms; a free string alone
 * 0.27 / 0.37 → 0.08 / 0.11 ms. Stacks below that do differ (`anyOf` 64 arrays, each of its own string: 64 groups)
 * 5.1 / 5.6 → 0.7 / 0.8 ms, and 1.3 ms p90 when every other mask is a fresh string's (64 walks).
 */
import type { Grammar } from './grammar.js';
import type { Frame, Stack } from './grammar-stack.js';
import { STRING_SUB_COUNT } from './json-string.js';
import { StateEquivalence } from './mask-equivalence.js';
import { tailVerdicts } from './tail-verdicts.js';
import { INSIDE_STEPS, type StringScan, type TokenIndex } from './token-index.js';

/** String frames in one sub-state whose stacks below read alike */
interface Group {
  sub: number;
  /** the first of them: the tails are checked against its stack below */
  frame: Frame;
  /** per frame, the characters a closing token may start, as [lo, hi] pairs (hi infinite: no maxLength) */
  closing: number[];
}

export class StringMasks {
  private readonly equivalence: StateEquivalence;
  /**
   * tail verdicts per frame below a string (after dead frames), per sub-state; weak, so they go with the parses that
   * hold the frame: at most one per sub-state for each frame of a live stack
   */
  private readonly verdicts = new WeakMap<Frame, (Uint8Array | undefined)[]>();
  /** walks over a tail trie so far (for tests and the bench) */
  walks = 0;

  constructor(
    private readonly g: Grammar,
    private readonly index: TokenIndex,
  ) {
    this.equivalence = new StateEquivalence(g);
  }

  /** ORs into `bits` the tokens some string frame allows (each frame the top of one of a position's stacks). */
  fill(frames: readonly Frame[], bits: Uint32Array): void {
    const rooms = new Array<number>(STRING_SUB_COUNT).fill(-1);
    const groups: Group[] = [];
    this.equivalence.startMask();
    for (const f of frames) {
      const rule = this.g.strings[this.g.stringOf[f.state]!]!;
      const sub = f.state - rule.base;
      const room = (rule.maxLength ?? Number.POSITIVE_INFINITY) - f.count; // characters the string may still take
      rooms[sub] = Math.max(rooms[sub]!, room);
      const lo = Math.max(rule.minLength - f.count, 0);
      const group = groups.find((x) => x.sub === sub && this.equivalence.sameBelow(x.frame.parent, f.parent));
      if (group === undefined) groups.push({ sub, frame: f, closing: [lo, room] });
      else group.closing.push(lo, room);
    }
    rooms.forEach((room, sub) => {
      if (room >= 0) insideMask(this.index.stringScan(sub), room, bits);
    });
    for (const group of groups) this.closingMask(group, bits);
  }

  private closingMask(group: Group, bits: Uint32Array): void {
    const scan = this.index.stringScan(group.sub);
    const closes = closingChars(group.closing, scan.closersCharsMax);
    let verdicts: Uint8Array | undefined;
    const { closers, closerTail, chars } = scan;
    for (let c = 0; c < closers.length; c++) {
      const t = closers[c]!;
      if (closes[chars[t]!] !== 1) continue;
      const tail = closerTail[c]!;
      if (tail >= 0) {
        verdicts ??= this.tailVerdicts(group.frame.parent, group.sub, scan);
        if (verdicts[tail] !== 1) continue;
      }
      bits[t >>> 5]! |= 1 << (t & 31);
    }
  }

  private tailVerdicts(parent: Stack, sub: number, scan: StringScan): Uint8Array {
    const below = this.equivalence.below(parent);
    if (below === null) {
      this.walks++;
      return tailVerdicts(this.g, below, scan.tails); // nothing reads on: every tail dies at once
    }
    let bySub = this.verdicts.get(below);
    if (bySub === undefined) {
      bySub = new Array<Uint8Array | undefined>(STRING_SUB_COUNT).fill(undefined);
      this.verdicts.set(below, bySub);
    }
    let verdicts = bySub[sub];
    if (verdicts === undefined) {
      this.walks++;
      verdicts = tailVerdicts(this.g, below, scan.tails);
      bySub[sub] = verdicts;
    }
    return verdicts;
  }
}

/** The tokens that stay inside a string from the scan's sub-state starting at most `room` characters. */
function insideMask(scan: StringScan, room: number, bits: Uint32Array): void {
  if (scan.insideCharsMax <= room) {
    orInto(bits, scan.inside);
    return;
  }
  // the largest bitset that fits, then the tokens of more characters that still fit, one by one
  let from = 0;
  for (let i = scan.insideUpTo.length - 1; i >= 0; i--) {
    if (INSIDE_STEPS[i]! > room) continue;
    orInto(bits, scan.insideUpTo[i]!);
    from = INSIDE_STEPS[i]! + 1;
    break;
  }
  const { insideByChars, charsStart } = scan;
  for (let j = charsStart[from]!; j < charsStart[room + 1]!; j++) {
    const t = insideByChars[j]!;
    bits[t >>> 5]! |= 1 << (t & 31);
  }
}

/** Which character counts of a closing token close some frame of a group within its bounds, one byte per count. */
function closingChars(closing: readonly number[], charsMax: number): Uint8Array {
  const closes = new Uint8Array(charsMax + 1);
  for (let i = 0; i < closing.length; i += 2) closes.fill(1, closing[i]!, Math.min(closing[i + 1]!, charsMax) + 1);
  return closes;
}

function orInto(bits: Uint32Array, set: Uint32Array): void {
  for (let w = 0; w < set.length; w++) bits[w]! |= set[w]!;
}
