import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SeededRandom } from '../util/random.js';
import { CompiledGrammar, hasBit } from './compiled-grammar.js';
import { GrammarBuilder } from './grammar-builder.js';
import { GrammarCache } from './grammar-cache.js';
import { GrammarMatcher } from './grammar-matcher.js';
import type { Frame, Stack } from './grammar-stack.js';
import { PAIRS_PER_MASK, StateEquivalence } from './mask-equivalence.js';
import { TokenIndex, type VocabularySource } from './token-index.js';

/**
 * A vocabulary of JSON-shaped pieces: closing tokens with many tails after the quote (the generated test vocabularies
 * have one or two), tokens of many lengths (to cross a maxLength), escapes and multi-byte characters.
 */
const PIECES = [
  ...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)),
  ...['ab', 'abc', 'abcd', 'hello', 'x'.repeat(9), 'y'.repeat(17), 'z'.repeat(33), 'é', 'éa', '日本', '😀', '\\"'],
  ...['\\u', '\\u00e9', '\\n', '\\\\', 'u00', 'e9', '"a', '"ab', '"x"', '""', '" ', '"é'],
  ...['",', '"]', '"}', '",\\"', '"],', '"]]', '"}]', '"},', '":', '":"', '","', '"],["', '"]}', '"},{"', '"]],["'],
  ...['",["', '",[', '"],[', '"}}', '",{"', '",0', '",1', '"a":"', '"b', '"b0', '"b1":', '",-', '"]}]', '"1', '"\\'],
  ...['{"', '{"a":"', '{"a":', '["', '[["', '[', ']', '{', '}', ',"', '0', '12', '-3', 'true', 'null', ':"', '"b0":'],
  ...['",""', '","b":1', '","b":t', '"!', '"!]', '!', '!]'],
];

const vocabulary: VocabularySource = {
  vocabSize: PIECES.length,
  decodeBytes: (ids) => Buffer.concat(ids.map((id) => Buffer.from(PIECES[id]!, 'utf8'))),
  isEndOfGeneration: () => false,
};

const strings = (k: number, bounds: (i: number) => object) => ({
  anyOf: Array.from({ length: k }, (_, i) => ({ type: 'string', ...bounds(i) })),
});
const range = <T>(k: number, f: (i: number) => T): T[] => Array.from({ length: k }, (_, i) => f(i));

/** Many parses at once inside strings: alike below (one group), different below, and both at different depths. */
const SCHEMAS: Record<string, object> = {
  minLengths: { type: 'array', items: strings(24, (i) => ({ minLength: i })) },
  maxLengths: { type: 'array', items: strings(24, (i) => ({ maxLength: i })), minItems: 2 },
  holes: {
    type: 'array',
    items: strings(
      4,
      (i) => [{ maxLength: 0 }, { minLength: 2, maxLength: 2 }, { minLength: 5, maxLength: 6 }, {}][i]!,
    ),
  },
  // the stacks below differ: each array calls its own string rule, or may hold one more item
  arrays: {
    anyOf: range(12, (i) => ({ type: 'array', items: { type: 'string', minLength: i % 3, maxLength: 4 + i } })),
  },
  oneOrMore: {
    anyOf: [
      { type: 'array', items: { type: 'string', maxLength: 3 }, maxItems: 1 },
      { type: 'array', items: { type: 'string', minLength: 1 } },
    ],
  },
  objects: {
    type: 'array',
    items: {
      anyOf: range(8, (i) => ({
        type: 'object',
        properties: { a: { type: 'string', minLength: i }, [`b${i % 2}`]: { type: 'integer' } },
        required: ['a', `b${i % 2}`],
        additionalProperties: false,
      })),
    },
  },
  nested: {
    $defs: {
      node: {
        anyOf: [
          ...strings(6, (i) => ({ maxLength: 2 * i })).anyOf,
          { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 },
        ],
      },
    },
    $ref: '#/$defs/node',
  },
  mixed: {
    type: 'array',
    items: {
      anyOf: [
        { enum: ['ab"', 'é', 'x'] },
        ...strings(6, (i) => ({ minLength: i, maxLength: 3 + i })).anyOf,
        { type: 'integer' },
      ],
    },
    maxItems: 6,
  },
  // alike up to a byte or two: the states below differ only in what follows the comma
  thenIntegerOrBoolean: {
    type: 'array',
    items: {
      anyOf: [
        { a: { type: 'string', minLength: 1 }, b: { type: 'integer' } },
        { a: { type: 'string', maxLength: 5 }, b: { type: 'boolean' } },
      ].map((properties) => ({ type: 'object', properties, required: ['a', 'b'], additionalProperties: false })),
    },
  },
  // … or only in the string rule the next item calls (one takes `""`, the other does not)
  emptyOrNot: {
    anyOf: [{ minLength: 3 }, { maxLength: 2 }].map((s) => ({ type: 'array', items: { type: 'string', ...s } })),
  },
  notOrEmpty: {
    anyOf: [{ maxLength: 2 }, { minLength: 3 }].map((s) => ({ type: 'array', items: { type: 'string', ...s } })),
  },
  freeObject: { type: 'object', properties: { a: strings(8, (i) => ({ minLength: i })) }, additionalProperties: true },
};

function closingPieces(index: TokenIndex): number[] {
  return range(index.vocabSize, (t) => t).filter((t) => PIECES[t]!.includes('"'));
}

/**
 * A position's mask against the definition, token by token: a token is allowed iff accepting it leaves a valid prefix
 * (a straightforward per-stack computation, with no grouping, trie or cache). Returns the tokens allowed.
 */
function checkMask(m: GrammarMatcher, bits: Uint32Array, at: string): number[] {
  const complete = m.fillMask(bits);
  assert.equal(complete, m.complete, `complete at ${at}`);
  const allowed: number[] = [];
  for (let t = 0; t < m.compiled.index.vocabSize; t++) {
    const probe = Object.create(m) as GrammarMatcher;
    assert.equal(hasBit(bits, t), probe.accept(t), `token ${JSON.stringify(PIECES[t])} after ${at}`);
    if (hasBit(bits, t)) allowed.push(t);
  }
  return allowed;
}

/** Random walks, each position's mask checked; returns how many positions had several parses. */
function checkWalks(compiled: CompiledGrammar, name: string, walks: number, random: SeededRandom): number {
  const { index } = compiled;
  const bits = new Uint32Array(Math.ceil(index.vocabSize / 32));
  const closing = closingPieces(index);
  let manyParses = 0;
  for (let walk = 0; walk < walks; walk++) {
    const m = new GrammarMatcher(compiled);
    let text = '';
    for (let step = 0; step < 50 && !m.finished; step++) {
      const allowed = checkMask(m, bits, `${name}: ${text}`);
      if ((m as unknown as { stacks: Stack[] }).stacks.length > 1) manyParses++;
      if (allowed.length === 0) break;
      // close strings often, and leave them mid-escape now and then (a sub-state other than BODY, same frame below)
      const closers = allowed.filter((t) => closing.includes(t));
      const escapes = allowed.filter((t) => PIECES[t] === '\\' || PIECES[t] === '\\u');
      const roll = random.nextInt(6);
      const pool = roll < 2 && closers.length > 0 ? closers : roll === 2 && escapes.length > 0 ? escapes : allowed;
      const t = pool[random.nextInt(pool.length)]!;
      assert.ok(m.accept(t));
      text += PIECES[t];
    }
  }
  return manyParses;
}

describe('string masks with many parses', () => {
  const index = new TokenIndex(vocabulary);

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(`equal the token-by-token check along random walks (${name})`, () => {
      const compiled = new GrammarCache(index).compile({ kind: 'json_schema', schema }, 'a');
      const manyParses = checkWalks(compiled, name, 12, new SeededRandom(name.length * 7919));
      assert.ok(manyParses > 0, 'the walks reached positions of several parses');
    });
  }

  it('equal the token-by-token check where the states below differ only in whether they may end', () => {
    // root = (R1 | R2) "]" with R1 = string(minLength 2) "!"?, R2 = string "!": after the string, R1's state may end
    // and R2's may not, with the same byte edges
    for (const [first, second] of [
      [2, 0],
      [0, 2],
    ] as const) {
      const b = new GrammarBuilder('response_format');
      const r1 = b.rule('r1', () => b.seq(b.call(b.stringRule(first, undefined)), b.optional(b.literal('!'))));
      const r2 = b.rule('r2', () => b.seq(b.call(b.stringRule(second, undefined)), b.literal('!')));
      const root = b.rule('root', () => b.seq(b.alt(b.call(r1), b.call(r2)), b.literal(']')));
      const compiled = new CompiledGrammar(b.build(root), index);
      const manyParses = checkWalks(compiled, `ends ${first} ${second}`, 24, new SeededRandom(5 + first));
      assert.ok(manyParses > 0);
    }
  });

  it('frames below that differ only in state ids are alike; different continuations are not', () => {
    const compiled = new GrammarCache(index).compile({ kind: 'json_schema', schema: SCHEMAS.minLengths! }, 'a');
    const m = new GrammarMatcher(compiled);
    assert.ok(m.accept(PIECES.indexOf('["')));
    const stacks = (m as unknown as { stacks: Frame[] }).stacks;
    assert.equal(stacks.length, 24);
    const eq = new StateEquivalence(compiled.grammar);
    assert.equal(new Set(stacks.map((f) => f.parent!.state)).size, 24, 'each branch returns to its own state');
    for (const f of stacks) assert.ok(eq.sameBelow(stacks[0]!.parent, f.parent));

    const other = new GrammarCache(index).compile({ kind: 'json_schema', schema: SCHEMAS.oneOrMore! }, 'a');
    const o = new GrammarMatcher(other);
    assert.ok(o.accept(PIECES.indexOf('["')));
    const two = (o as unknown as { stacks: Frame[] }).stacks;
    assert.equal(two.length, 2);
    assert.equal(new StateEquivalence(other.grammar).sameBelow(two[0]!.parent, two[1]!.parent), false);
  });

  it('the checks of one mask visit a bounded number of state pairs; what they leave, later masks take up', () => {
    // 64 parses alike only over a 400-byte const each: unbounded, every string's first mask compared them 33–43 ms
    // on the engine's thread with Llama 3's vocabulary (I11 review)
    const item = (i: number) => ({
      type: 'object',
      properties: { s: { type: 'string', minLength: i }, c: { const: 'y'.repeat(400) } },
      required: ['s', 'c'],
      additionalProperties: false,
    });
    const schema = { type: 'array', items: { anyOf: range(64, item) } };
    const compiled = new GrammarCache(index).compile({ kind: 'json_schema', schema }, 'a');
    const m = new GrammarMatcher(compiled);
    for (const piece of ['[', '{"', 's', '":"']) assert.ok(m.accept(PIECES.indexOf(piece)), piece);
    const stacks = (m as unknown as { stacks: Frame[] }).stacks;
    assert.equal(stacks.length, 64);
    const eq = new StateEquivalence(compiled.grammar);
    const groups = () => {
      eq.startMask();
      const firsts: Frame[] = [];
      for (const f of stacks) if (!firsts.some((g) => eq.sameBelow(g.parent, f.parent))) firsts.push(f);
      return firsts.length;
    };
    const counts = [groups()];
    assert.ok(eq.pairsVisited <= PAIRS_PER_MASK, `${eq.pairsVisited} pairs in one mask`);
    assert.ok(counts[0]! > 1, 'the budget ran out before every parse was shown alike');
    while (counts.at(-1)! > 1 && counts.length < 8) counts.push(groups());
    assert.equal(counts.at(-1), 1, `groups mask by mask: ${counts.join(', ')}`);
    assert.ok(eq.pairsVisited <= counts.length * PAIRS_PER_MASK);
  });

  it('a position of many parses alike walks the tails once, then finds them while the string goes on', () => {
    const compiled = new GrammarCache(index).compile({ kind: 'json_schema', schema: SCHEMAS.minLengths! }, 'a');
    const m = new GrammarMatcher(compiled);
    const bits = new Uint32Array(Math.ceil(index.vocabSize / 32));
    assert.ok(m.accept(PIECES.indexOf('["')));
    m.fillMask(bits);
    assert.equal(compiled.tailWalks, 1, '24 parses, one walk');
    assert.ok(m.accept(PIECES.indexOf('hello')));
    m.fillMask(bits);
    assert.equal(compiled.tailWalks, 1, 'the same frame below: its verdicts are kept');
    assert.ok(m.accept(PIECES.indexOf('","')));
    m.fillMask(bits);
    assert.equal(compiled.tailWalks, 2, 'a new item: a new frame below');
  });

  it('a frame below keeps its tails’ verdicts per sub-state (a key after an escape ends with `":`)', () => {
    const compiled = new GrammarCache(index).compile({ kind: 'json_object' }, 'a');
    const m = new GrammarMatcher(compiled);
    const bits = new Uint32Array(Math.ceil(index.vocabSize / 32));
    for (const piece of ['{"', 'ab', '\\']) {
      assert.ok(m.accept(PIECES.indexOf(piece)));
      checkMask(m, bits, piece);
    }
    assert.ok(hasBit(bits, PIECES.indexOf('"b0":')), 'an escaped quote, then the key closes');
  });
});
