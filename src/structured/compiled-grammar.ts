/**
 * A Grammar bound to a vocabulary, with the token masks of its positions cached (shared by every request with the same
 * schema; the cache only ever holds facts about the grammar and the vocabulary, never a request's text).
 *
 * The mask of a stack is the union over the positions a next byte can be read from — the top frame, and the frames
 * below it for as long as the ones above may end:
 *   - a string frame: its scan's bitsets (token-index.ts) and the tokens that close it, their tails after the quote
 *     checked against the rest of the stack; the string frames of all the stacks together (string-mask.ts), since
 *     many parses at one string position mostly differ only in their bounds;
 *   - a DFA state: its classes, computed once by walking the token trie from that state alone (BOUNDARY below):
 *     `accepted` tokens are read entirely by the state and what it calls, whatever lies below; `late` tokens leave the
 *     state partway and are checked against the real stack; tokens that leave it before their first byte belong to
 *     the frame below, which the union visits next.
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { Grammar } from './grammar.js';
import { BOUNDARY_FRAME, Frame, type Stack, stepBytes, stepStacks } from './grammar-stack.js';
import { StringMasks } from './string-mask.js';
import type { TokenIndex } from './token-index.js';

export interface StateClasses {
  accepted: Int32Array;
  late: Int32Array;
}

export class CompiledGrammar {
  private readonly classes = new Map<number, StateClasses>();
  private readonly strings: StringMasks;

  constructor(
    readonly grammar: Grammar,
    readonly index: TokenIndex,
  ) {
    this.strings = new StringMasks(grammar, index);
  }

  /** DFA states whose classes are cached (for tests and the bench) */
  get cachedStates(): number {
    return this.classes.size;
  }

  /** walks over a string scan's tails so far, one per group of string frames alike below (for tests and the bench) */
  get tailWalks(): number {
    return this.strings.walks;
  }

  /**
   * Sets in `bits` (one bit per token, cleared first) every token that keeps some stack a valid prefix. Returns whether
   * the document may end here (then end-of-generation tokens are the caller's to allow).
   */
  fillMask(stacks: readonly Stack[], bits: Uint32Array): boolean {
    bits.fill(0);
    let complete = false;
    const strings: Frame[] = [];
    for (const stack of stacks) {
      let f: Stack = stack;
      for (;;) {
        if (f === null) {
          complete = true;
          break;
        }
        const s = f.state;
        if (this.grammar.stringOf[s]! >= 0) {
          strings.push(f);
          break; // a string frame on top is never accepting (closed strings are popped)
        }
        const c = this.classesOf(s);
        for (const t of c.accepted) bits[t >>> 5]! |= 1 << (t & 31);
        for (const t of c.late) {
          if (hasBit(bits, t)) continue;
          if (
            stepBytes(this.grammar, [f], this.index.bytes, this.index.offsets[t]!, this.index.offsets[t + 1]!).length >
            0
          )
            bits[t >>> 5]! |= 1 << (t & 31);
        }
        if (this.grammar.accepting[s] !== 1) break;
        f = f.parent;
      }
    }
    this.strings.fill(strings, bits);
    return complete;
  }

  classesOf(state: number): StateClasses {
    let c = this.classes.get(state);
    if (c === undefined) {
      c = this.walk(state);
      this.classes.set(state, c);
    }
    return c;
  }

  /** Depth-first over the token trie from one DFA state with BOUNDARY below it. */
  private walk(state: number): StateClasses {
    const { index } = this;
    const accepted: number[] = [];
    const late: number[] = [];
    const start = new Frame(state, 0, BOUNDARY_FRAME);
    const todo: { node: number; stacks: Stack[]; late: boolean; depth: number }[] = [];
    const visitChildren = (node: number, stacks: Stack[], isLate: boolean, depth: number) => {
      for (let child = index.firstChild[node]!; child >= 0; child = index.nextSibling[child]!) {
        const next: Stack[] = [];
        const escaped = stacks.length > 0 && stepStacks(this.grammar, stacks, index.nodeByte[child]!, next);
        if (next.length > LIMITS.grammarStacksMax) throw ambiguous();
        // leaving before the first byte is the frame below's business (fillMask visits it); leaving later is not
        const childLate = isLate || (escaped && depth > 0);
        if (next.length === 0 && !childLate) continue;
        todo.push({ node: child, stacks: next, late: childLate, depth: depth + 1 });
      }
    };
    visitChildren(0, [start], false, 0);
    while (todo.length > 0) {
      const { node, stacks, late: isLate, depth } = todo.pop()!;
      for (let t = index.firstToken[node]!; t >= 0; t = index.tokenNext[t]!) {
        if (stacks.length > 0) accepted.push(t);
        else late.push(t);
      }
      visitChildren(node, stacks, isLate, depth);
    }
    return { accepted: Int32Array.from(accepted), late: Int32Array.from(late) };
  }
}

export function hasBit(bits: Uint32Array, t: number): boolean {
  return ((bits[t >>> 5]! >>> (t & 31)) & 1) === 1;
}

export function ambiguous(): KvfenceError {
  return new KvfenceError(
    'invalid_request_error',
    `the response format is too ambiguous to follow (more than ${LIMITS.grammarStacksMax} parses at once)`,
  );
}
