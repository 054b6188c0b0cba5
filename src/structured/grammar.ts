/**
 * A compiled grammar: a recursive transition network over bytes. Every rule is a DFA whose states have byte edges
 * (sorted ranges), call edges ("run rule R, then continue in state T") and an accepting flag; string rules are native
 * JSON-string machines (json-string.ts) occupying STRING_SUB_COUNT consecutive state ids. State ids are global, so a
 * parse position is just a stack of (state, count) frames. Immutable once built: one Grammar serves every request with
 * the same schema, while each request's position lives in its own GrammarMatcher.
 */
import { assert } from '../util/assert.js';
import { STRING_SUB_COUNT, SUB } from './json-string.js';

export interface StringRule {
  minLength: number;
  maxLength: number | undefined;
  /** the state id of its OPEN sub-state */
  base: number;
}

export interface GrammarTables {
  stateCount: number;
  /** byte ranges of state s at [rangeStart[s], rangeStart[s + 1]) */
  rangeStart: Int32Array;
  rangeLo: Uint8Array;
  rangeHi: Uint8Array;
  rangeTarget: Int32Array;
  /** call edges of state s at [callStart[s], callStart[s + 1]) */
  callStart: Int32Array;
  callRule: Int32Array;
  callReturn: Int32Array;
  accepting: Uint8Array;
  /** the string rule a state belongs to, or -1 for DFA states */
  stringOf: Int32Array;
  ruleStart: Int32Array;
  rootRule: number;
  strings: StringRule[];
}

export class Grammar implements GrammarTables {
  readonly stateCount: number;
  readonly rangeStart: Int32Array;
  readonly rangeLo: Uint8Array;
  readonly rangeHi: Uint8Array;
  readonly rangeTarget: Int32Array;
  readonly callStart: Int32Array;
  readonly callRule: Int32Array;
  readonly callReturn: Int32Array;
  readonly accepting: Uint8Array;
  readonly stringOf: Int32Array;
  readonly ruleStart: Int32Array;
  readonly rootRule: number;
  readonly strings: StringRule[];
  /** states with no way forward: accepting dead ends, popped as soon as they are reached */
  readonly dead: Uint8Array;

  constructor(t: GrammarTables) {
    this.stateCount = t.stateCount;
    this.rangeStart = t.rangeStart;
    this.rangeLo = t.rangeLo;
    this.rangeHi = t.rangeHi;
    this.rangeTarget = t.rangeTarget;
    this.callStart = t.callStart;
    this.callRule = t.callRule;
    this.callReturn = t.callReturn;
    this.accepting = t.accepting;
    this.stringOf = t.stringOf;
    this.ruleStart = t.ruleStart;
    this.rootRule = t.rootRule;
    this.strings = t.strings;
    this.dead = new Uint8Array(t.stateCount);
    for (let s = 0; s < t.stateCount; s++) {
      const isString = t.stringOf[s]! >= 0;
      const noEdges = t.rangeStart[s] === t.rangeStart[s + 1] && t.callStart[s] === t.callStart[s + 1];
      const dead = isString ? s - t.strings[t.stringOf[s]!]!.base === SUB.CLOSED : noEdges;
      if (dead) assert(t.accepting[s] === 1, `grammar state ${s} has no way forward and does not accept`);
      this.dead[s] = dead ? 1 : 0;
    }
    assert(
      t.strings.every((r) => r.base + STRING_SUB_COUNT <= t.stateCount),
      'string rules lie inside the states',
    );
  }

  /** The DFA target of state s on byte b, or -1. */
  target(s: number, b: number): number {
    const end = this.rangeStart[s + 1]!;
    for (let i = this.rangeStart[s]!; i < end; i++) {
      if (b >= this.rangeLo[i]! && b <= this.rangeHi[i]!) return this.rangeTarget[i]!;
    }
    return -1;
  }

  get rootStart(): number {
    return this.ruleStart[this.rootRule]!;
  }
}
