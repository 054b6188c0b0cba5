/**
 * Parse positions in a Grammar and how bytes move them. A position is a stack of frames, kept as an immutable linked
 * list (a step replaces the top and shares the rest), and a parse is a small set of such stacks — several only while
 * an ambiguity (two `$ref`s that start alike) is unresolved.
 *
 *   top ▶ (string BODY, 3 chars) ─▶ (object: after `"name":`, return point) ─▶ (root: …) ─▶ null
 *
 * `null` as a whole stack is the finished document. Frames in a dead accepting state (a closed string, a closed
 * object) are popped at once, so a stack's top can always read another byte. BOUNDARY stands for "whatever lies below"
 * when masks are precomputed for one position without its context (compiled-grammar.ts).
 */
import type { Grammar } from './grammar.js';
import { nextCount, STARTS_CHAR, SUB, stringByte, subOf } from './json-string.js';

export const BOUNDARY = -1;

export class Frame {
  constructor(
    readonly state: number,
    /** characters so far, for string frames (0 otherwise) */
    readonly count: number,
    readonly parent: Frame | null,
  ) {}
}

export type Stack = Frame | null;

/** The context boundary: stepping it means the bytes belong to an unknown caller. */
export const BOUNDARY_FRAME = new Frame(BOUNDARY, 0, null);

/**
 * Steps every stack by one byte, appending the distinct successors to `out`. Returns true when some path reached
 * BOUNDARY with the byte still to read (it escapes the frames being examined).
 */
export function stepStacks(g: Grammar, stacks: readonly Stack[], b: number, out: Stack[]): boolean {
  let escaped = false;
  const work: Frame[] = [];
  for (const stack of stacks) if (stack !== null) work.push(stack);
  while (work.length > 0) {
    const f = work.pop()!;
    const s = f.state;
    if (s === BOUNDARY) {
      escaped = true;
      continue;
    }
    const stringRule = g.stringOf[s]!;
    if (stringRule >= 0) {
      const next = stepString(g, f, stringRule, b);
      if (next !== undefined) push(g, next, out);
      continue;
    }
    const t = g.target(s, b);
    if (t >= 0) push(g, new Frame(t, 0, f.parent), out);
    const callEnd = g.callStart[s + 1]!;
    for (let i = g.callStart[s]!; i < callEnd; i++) {
      const back = new Frame(g.callReturn[i]!, 0, f.parent);
      work.push(new Frame(g.ruleStart[g.callRule[i]!]!, 0, back));
    }
    if (g.accepting[s] === 1 && f.parent !== null) work.push(f.parent);
  }
  return escaped;
}

function stepString(g: Grammar, f: Frame, stringRule: number, b: number): Frame | undefined {
  const rule = g.strings[stringRule]!;
  const step = stringByte(f.state - rule.base, b);
  if (step < 0) return undefined;
  let count = f.count;
  if (step & STARTS_CHAR) {
    if (rule.maxLength !== undefined && count >= rule.maxLength) return undefined;
    count = nextCount(count, rule.minLength, rule.maxLength);
  }
  const sub = subOf(step);
  if (sub === SUB.CLOSED && count < rule.minLength) return undefined;
  return new Frame(rule.base + sub, count, f.parent);
}

/** Pops dead accepting frames, then adds the stack unless an equal one is there. */
function push(g: Grammar, frame: Frame, out: Stack[]): void {
  let top: Stack = frame;
  while (top !== null && top.state !== BOUNDARY && g.dead[top.state] === 1) top = top.parent;
  for (const other of out) if (sameStack(other, top)) return;
  out.push(top);
}

function sameStack(a: Stack, b: Stack): boolean {
  if (a === b) return true;
  return a !== null && b !== null && a.state === b.state && a.count === b.count && a.parent === b.parent;
}

/** Steps stacks through bytes [from, to); the surviving stacks (empty: rejected). */
export function stepBytes(g: Grammar, stacks: readonly Stack[], bytes: Uint8Array, from: number, to: number): Stack[] {
  let current: Stack[] = [...stacks];
  for (let i = from; i < to && current.length > 0; i++) {
    const next: Stack[] = [];
    stepStacks(g, current, bytes[i]!, next);
    current = next;
  }
  return current;
}

/** The document may end here: every frame of the stack can finish. */
export function canEnd(g: Grammar, stack: Stack): boolean {
  for (let f = stack; f !== null; f = f.parent) {
    if (f.state === BOUNDARY || g.accepting[f.state] !== 1) return false;
  }
  return true;
}
