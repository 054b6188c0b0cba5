import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import type { Grammar } from './grammar.js';
import { constraintGrammar } from './grammar-cache.js';
import { canEnd, Frame, stepBytes } from './grammar-stack.js';

/** The whole text is a complete document of the grammar. */
function accepts(g: Grammar, text: string): boolean {
  const bytes = Buffer.from(text, 'utf8');
  const stacks = stepBytes(g, [new Frame(g.rootStart, 0, null)], bytes, 0, bytes.length);
  return stacks.some((s) => canEnd(g, s));
}

function grammarOf(schema: unknown): Grammar {
  return constraintGrammar({ kind: 'json_schema', schema });
}

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 4 },
    age: { type: 'integer' },
    nick: { type: 'string' },
    tags: { type: 'array', items: { enum: ['x', 'yz'] }, minItems: 1, maxItems: 2 },
  },
  required: ['name', 'age', 'tags'],
  additionalProperties: false,
};

describe('schema grammars read compact JSON exactly as the schema allows', () => {
  it('objects: properties in schema order, optional ones skippable, nothing undeclared, no whitespace', () => {
    const g = grammarOf(PERSON);
    for (const ok of [
      '{"name":"Ann","age":3,"tags":["x"]}',
      '{"name":"Ann","age":-30,"nick":"","tags":["yz","x"]}',
      '{"name":"éé€𝄞","age":0,"tags":["x"]}',
      '{"name":"a\\n\\u00e9","age":1,"tags":["x"]}',
    ]) {
      assert.ok(accepts(g, ok), ok);
    }
    for (const bad of [
      '{"age":3,"name":"Ann","tags":["x"]}', // order
      '{"name":"Ann","age":3}', // required missing
      '{"name":"Ann","age":3,"tags":["x"],"z":1}', // undeclared
      '{"name": "Ann","age":3,"tags":["x"]}', // whitespace
      '{"name":"","age":3,"tags":["x"]}', // minLength
      '{"name":"Annie","age":3,"tags":["x"]}', // maxLength
      '{"name":"Ann","age":03,"tags":["x"]}', // leading zero
      '{"name":"Ann","age":1.5,"tags":["x"]}', // integer
      '{"name":"Ann","age":3,"tags":[]}', // minItems
      '{"name":"Ann","age":3,"tags":["x","x","x"]}', // maxItems
      '{"name":"Ann","age":3,"tags":["y"]}', // enum
      '{"name":"\\ud800","age":3,"tags":["x"]}', // lone surrogate escape
      '{"name":"a\u0001","age":3,"tags":["x"]}', // control character
      '{"name":"Ann","age":1234567890123456,"tags":["x"]}', // more than 15 digits
    ]) {
      assert.ok(!accepts(g, bad), bad);
    }
  });

  it('strings are well-formed UTF-8, counted in code points', () => {
    const g = grammarOf({ type: 'string', maxLength: 2 });
    assert.ok(accepts(g, '"𝄞é"'));
    assert.ok(!accepts(g, '"𝄞éa"'));
    const bytes = (...b: number[]) => Buffer.from(b);
    const steps = (b: Buffer) => stepBytes(g, [new Frame(g.rootStart, 0, null)], b, 0, b.length).length > 0;
    assert.ok(!steps(bytes(0x22, 0xc0, 0x80)), 'overlong');
    assert.ok(!steps(bytes(0x22, 0xed, 0xa0, 0x80)), 'UTF-8 surrogate');
    assert.ok(!steps(bytes(0x22, 0xf4, 0x90)), 'above U+10FFFF');
    assert.ok(steps(bytes(0x22, 0xe2, 0x82)), 'a character in progress');
  });

  it('numbers, anyOf, nullable type arrays, const and nested $ref recursion', () => {
    const g = grammarOf({
      type: 'object',
      properties: {
        n: { type: 'number' },
        u: { anyOf: [{ type: 'string', maxLength: 1 }, { type: 'null' }, { const: [1, 'a'] }] },
        tree: { $ref: '#/$defs/node' },
      },
      required: ['n', 'u', 'tree'],
      additionalProperties: false,
      $defs: {
        node: {
          type: 'object',
          properties: { kids: { type: 'array', items: { $ref: '#/$defs/node' } } },
          required: ['kids'],
          additionalProperties: false,
        },
      },
    });
    assert.ok(accepts(g, '{"n":-0.25,"u":null,"tree":{"kids":[]}}'));
    assert.ok(accepts(g, '{"n":7,"u":"a","tree":{"kids":[{"kids":[{"kids":[]}]},{"kids":[]}]}}'));
    assert.ok(accepts(g, '{"n":7,"u":[1,"a"],"tree":{"kids":[]}}'));
    assert.ok(!accepts(g, '{"n":1e5,"u":null,"tree":{"kids":[]}}'));
    assert.ok(!accepts(g, '{"n":1.,"u":null,"tree":{"kids":[]}}'));
    assert.ok(!accepts(g, '{"n":1,"u":"ab","tree":{"kids":[]}}'));
  });

  it('json_object: any object, any nesting', () => {
    const g = constraintGrammar({ kind: 'json_object' });
    assert.ok(accepts(g, '{}'));
    assert.ok(accepts(g, '{"a":[1,{"b":null},"x",true],"c":{"d":-1.5}}'));
    assert.ok(!accepts(g, '[]'));
    assert.ok(!accepts(g, '{"a":}'));
  });

  it('a $ref cycle that reads nothing in between is refused', () => {
    // it can end (b may be null), so it is the grammar's own check that refuses it, not the schema's
    const b = { anyOf: [{ $ref: '#/$defs/a' }, { type: 'null' }] };
    assert.throws(
      () => grammarOf({ $defs: { a: { $ref: '#/$defs/b' }, b }, $ref: '#/$defs/a' }),
      (e: unknown) => e instanceof KvfenceError && /recursion reaches itself/.test(e.message),
    );
  });
});

describe('the cost of compiling a schema is bounded, not only its size', () => {
  // many optional properties keep many branches open at once: a 7 KB schema of 300 took half a second, 1,000 took 6 s
  const optional = (n: number) => ({
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'integer' }])),
  });

  it('refuses a small schema that would cost too much to compile, naming why', () => {
    assert.throws(
      () => constraintGrammar({ kind: 'json_schema', schema: optional(300) }),
      (e: unknown) =>
        e instanceof KvfenceError && e.code === 'invalid_request_error' && /too complex to compile/.test(e.message),
    );
  });

  it('compiles schemas of the sizes clients send', () => {
    for (const schema of [optional(50), { ...optional(100), required: Object.keys(optional(100).properties) }]) {
      assert.ok(constraintGrammar({ kind: 'json_schema', schema }));
    }
  });
});
