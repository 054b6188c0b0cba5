/**
 * Builds a Grammar: rules are written as NFA fragments (bytes, sequence, alternative, call), then each rule is made
 * deterministic by subset construction, with call edges treated like symbols (two branches calling the same rule share
 * one call). Alternatives written inline (anyOf, enums, optional properties) thus become one DFA whose branches split
 * only where their bytes differ, so most parse positions are a single stack.
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { Grammar, type StringRule } from './grammar.js';
import { STRING_SUB_COUNT, SUB } from './json-string.js';

export interface Fragment {
  start: number;
  end: number;
}

type RuleDef =
  | { kind: 'nfa'; fragment: Fragment | undefined }
  | { kind: 'string'; minLength: number; maxLength: number | undefined };

export class GrammarBuilder {
  private readonly byteEdges: number[][] = []; // per NFA state: lo, hi, to, lo, hi, to, …
  private readonly epsEdges: number[][] = [];
  private readonly callEdges: number[][] = []; // per NFA state: rule, to, rule, to, …
  private readonly rules: RuleDef[] = [];
  private readonly ruleByKey = new Map<string, number>();

  constructor(private readonly param: string) {}

  bytes(lo: number, hi: number): Fragment {
    const f = this.fragment();
    this.byteEdges[f.start]!.push(lo, hi, f.end);
    return f;
  }

  literal(text: string): Fragment {
    const bytes = Buffer.from(text, 'utf8');
    assert(bytes.length > 0, 'a literal has bytes');
    return this.seq(...Array.from(bytes, (b) => this.bytes(b, b)));
  }

  seq(...parts: Fragment[]): Fragment {
    assert(parts.length > 0, 'a sequence has parts');
    for (let i = 1; i < parts.length; i++) this.epsEdges[parts[i - 1]!.end]!.push(parts[i]!.start);
    return { start: parts[0]!.start, end: parts[parts.length - 1]!.end };
  }

  alt(...options: Fragment[]): Fragment {
    assert(options.length > 0, 'an alternative has options');
    const f = this.fragment();
    for (const o of options) {
      this.epsEdges[f.start]!.push(o.start);
      this.epsEdges[o.end]!.push(f.end);
    }
    return f;
  }

  optional(part: Fragment): Fragment {
    const f = this.alt(part);
    this.epsEdges[f.start]!.push(f.end);
    return f;
  }

  /** `make()` repeated from `min` to `max` times (undefined: unbounded); each repetition is a fresh fragment. */
  repeat(make: () => Fragment, min: number, max: number | undefined): Fragment {
    const f = this.fragment();
    let at = f.start;
    for (let i = 0; i < min; i++) at = this.chain(at, make());
    if (max === undefined) {
      const loop = make();
      this.epsEdges[at]!.push(loop.start, f.end);
      this.epsEdges[loop.end]!.push(at);
      return f;
    }
    for (let i = min; i < max; i++) {
      this.epsEdges[at]!.push(f.end);
      at = this.chain(at, make());
    }
    this.epsEdges[at]!.push(f.end);
    return f;
  }

  /** A bare NFA position, for constructions that join several paths (object properties). */
  position(): number {
    return this.nfaState();
  }

  epsilon(from: number, to: number): void {
    this.epsEdges[from]!.push(to);
  }

  call(rule: number): Fragment {
    const f = this.fragment();
    this.callEdges[f.start]!.push(rule, f.end);
    return f;
  }

  /** A rule by key: `define` runs once per key (so recursion through the key terminates). */
  rule(key: string, define: () => Fragment): number {
    const known = this.ruleByKey.get(key);
    if (known !== undefined) return known;
    const id = this.rules.length;
    this.rules.push({ kind: 'nfa', fragment: undefined });
    this.ruleByKey.set(key, id);
    this.rules[id] = { kind: 'nfa', fragment: define() };
    return id;
  }

  stringRule(minLength: number, maxLength: number | undefined): number {
    const key = `string:${minLength}:${maxLength ?? ''}`;
    const known = this.ruleByKey.get(key);
    if (known !== undefined) return known;
    this.rules.push({ kind: 'string', minLength, maxLength });
    this.ruleByKey.set(key, this.rules.length - 1);
    return this.rules.length - 1;
  }

  /** The grammar, its construction bounded by `workMax` steps (a 400 past it). */
  build(rootRule: number, workMax: number = LIMITS.grammarWorkMax): Grammar {
    const { byteEdges, epsEdges, callEdges, rules, param } = this;
    return new Determinizer(byteEdges, epsEdges, callEdges, rules, param, workMax).run(rootRule);
  }

  private fragment(): Fragment {
    return { start: this.nfaState(), end: this.nfaState() };
  }

  private nfaState(): number {
    if (this.byteEdges.length >= LIMITS.grammarStatesMax * 4) throw tooLarge(this.param);
    this.byteEdges.push([]);
    this.epsEdges.push([]);
    this.callEdges.push([]);
    return this.byteEdges.length - 1;
  }

  private chain(at: number, part: Fragment): number {
    this.epsEdges[at]!.push(part.start);
    return part.end;
  }
}

function tooLarge(param: string): KvfenceError {
  return new KvfenceError(
    'invalid_request_error',
    `${param}: the schema makes a grammar of more than ${LIMITS.grammarStatesMax} states (large maxItems, enums or nesting)`,
    param,
  );
}

/** Subset construction, rule by rule, into one global numbering of DFA and string states. */
class Determinizer {
  /** steps of the subset construction so far (NFA states and edges visited), against workMax */
  private work = 0;
  private readonly ranges: number[][] = []; // per DFA state: lo, hi, to, …
  private readonly calls: number[][] = []; // per DFA state: rule, return, …
  private readonly accepting: number[] = [];
  private readonly stringOf: number[] = [];
  private readonly strings: StringRule[] = [];
  private readonly ruleStart: number[] = [];

  constructor(
    private readonly byteEdges: number[][],
    private readonly epsEdges: number[][],
    private readonly callEdges: number[][],
    private readonly rules: RuleDef[],
    private readonly param: string,
    private readonly workMax: number,
  ) {}

  run(rootRule: number): Grammar {
    this.rules.forEach((rule, id) => {
      if (rule.kind === 'string') this.ruleStart[id] = this.addString(rule.minLength, rule.maxLength);
      else this.ruleStart[id] = this.determinize(rule.fragment!);
    });
    this.checkNoLeftRecursion();
    return new Grammar(this.tables(rootRule));
  }

  private newState(stringRule = -1): number {
    if (this.accepting.length >= LIMITS.grammarStatesMax) throw tooLarge(this.param);
    this.ranges.push([]);
    this.calls.push([]);
    this.accepting.push(0);
    this.stringOf.push(stringRule);
    return this.accepting.length - 1;
  }

  private addString(minLength: number, maxLength: number | undefined): number {
    const index = this.strings.length;
    const base = this.newState(index);
    for (let i = 1; i < STRING_SUB_COUNT; i++) this.newState(index);
    this.accepting[base + SUB.CLOSED] = 1;
    this.strings.push({ minLength, maxLength, base });
    return base;
  }

  private closure(states: Iterable<number>): number[] {
    const seen = new Set<number>(states);
    const stack = [...seen];
    while (stack.length > 0) {
      const edges = this.epsEdges[stack.pop()!]!;
      this.spend(1 + edges.length);
      for (const next of edges) {
        if (!seen.has(next)) {
          seen.add(next);
          stack.push(next);
        }
      }
    }
    this.spend(seen.size);
    return [...seen].sort((a, b) => a - b);
  }

  private determinize(fragment: Fragment): number {
    const ids = new Map<string, number>();
    const pending: { set: number[]; id: number }[] = [];
    const idOf = (set: number[]): number => {
      this.spend(set.length);
      const key = set.join(',');
      let id = ids.get(key);
      if (id === undefined) {
        id = this.newState();
        ids.set(key, id);
        pending.push({ set, id });
      }
      return id;
    };
    const start = idOf(this.closure([fragment.start]));
    while (pending.length > 0) {
      const { set, id } = pending.pop()!;
      if (set.includes(fragment.end)) this.accepting[id] = 1;
      this.byteTransitions(set, id, idOf);
      const byRule = new Map<number, number[]>();
      for (const s of set) {
        const edges = this.callEdges[s]!;
        for (let i = 0; i < edges.length; i += 2) {
          const targets = byRule.get(edges[i]!) ?? [];
          targets.push(edges[i + 1]!);
          byRule.set(edges[i]!, targets);
        }
      }
      for (const [rule, targets] of [...byRule].sort((a, b) => a[0] - b[0]))
        this.calls[id]!.push(rule, idOf(this.closure(targets)));
    }
    return start;
  }

  /** Bytes split at every range boundary of the set's edges; each segment's targets make one DFA edge. */
  private byteTransitions(set: number[], id: number, idOf: (set: number[]) => number): void {
    const cuts = new Set<number>([0, 256]);
    this.spend(set.length);
    for (const s of set) {
      const e = this.byteEdges[s]!;
      for (let i = 0; i < e.length; i += 3) cuts.add(e[i]!).add(e[i + 1]! + 1);
    }
    const points = [...cuts].sort((a, b) => a - b);
    const out = this.ranges[id]!;
    for (let p = 0; p + 1 < points.length; p++) {
      const lo = points[p]!;
      const targets: number[] = [];
      this.spend(set.length);
      for (const s of set) {
        const e = this.byteEdges[s]!;
        for (let i = 0; i < e.length; i += 3) if (e[i]! <= lo && lo <= e[i + 1]!) targets.push(e[i + 2]!);
      }
      if (targets.length === 0) continue;
      const to = idOf(this.closure(targets));
      const hi = points[p + 1]! - 1;
      const n = out.length;
      if (n > 0 && out[n - 1] === to && out[n - 2]! + 1 === lo)
        out[n - 2] = hi; // merge with the previous range
      else out.push(lo, hi, to);
    }
  }

  /**
   * The construction's cost grows with how many branches stay open at once (an object of many optional properties,
   * an anyOf of many objects), not only with the states it makes: bounded, so that a small schema cannot hold the
   * gateway's event loop for seconds (DESIGN I11).
   */
  private spend(steps: number): void {
    this.work += steps;
    if (this.work > this.workMax) {
      throw new KvfenceError(
        'invalid_request_error',
        `${this.param}: the schema is too complex to compile (too many optional properties or anyOf branches open ` +
          'at once); make more properties required or split it',
        this.param,
      );
    }
  }

  /** A rule that can call itself before reading a byte would recurse forever: refused. */
  private checkNoLeftRecursion(): void {
    const firstCalls = this.ruleStart.map((start) => {
      const c = this.calls[start]!;
      return c.filter((_, i) => i % 2 === 0);
    });
    const state = new Uint8Array(this.rules.length); // 0 unvisited, 1 on the path, 2 done
    for (let root = 0; root < this.rules.length; root++) {
      if (state[root] !== 0) continue;
      const stack: { rule: number; next: number }[] = [{ rule: root, next: 0 }];
      state[root] = 1;
      while (stack.length > 0) {
        const top = stack[stack.length - 1]!;
        const callees = firstCalls[top.rule]!;
        if (top.next >= callees.length) {
          state[top.rule] = 2;
          stack.pop();
          continue;
        }
        const callee = callees[top.next++]!;
        if (state[callee] === 1) {
          throw new KvfenceError(
            'invalid_request_error',
            `${this.param}: a '$ref' recursion reaches itself without an object or array in between`,
            this.param,
          );
        }
        if (state[callee] === 0) {
          state[callee] = 1;
          stack.push({ rule: callee, next: 0 });
        }
      }
    }
    for (const start of this.ruleStart) assert(this.accepting[start] === 0, 'no rule matches the empty text');
  }

  private tables(rootRule: number) {
    const stateCount = this.accepting.length;
    const rangeStart = new Int32Array(stateCount + 1);
    const callStart = new Int32Array(stateCount + 1);
    for (let s = 0; s < stateCount; s++) {
      rangeStart[s + 1] = rangeStart[s]! + this.ranges[s]!.length / 3;
      callStart[s + 1] = callStart[s]! + this.calls[s]!.length / 2;
    }
    const flat = this.ranges.flat();
    const calls = this.calls.flat();
    return {
      stateCount,
      rangeStart,
      rangeLo: Uint8Array.from(flat.filter((_, i) => i % 3 === 0)),
      rangeHi: Uint8Array.from(flat.filter((_, i) => i % 3 === 1)),
      rangeTarget: Int32Array.from(flat.filter((_, i) => i % 3 === 2)),
      callStart,
      callRule: Int32Array.from(calls.filter((_, i) => i % 2 === 0)),
      callReturn: Int32Array.from(calls.filter((_, i) => i % 2 === 1)),
      accepting: Uint8Array.from(this.accepting),
      stringOf: Int32Array.from(this.stringOf),
      ruleStart: Int32Array.from(this.ruleStart),
      rootRule,
      strings: this.strings,
    };
  }
}
