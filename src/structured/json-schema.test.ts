import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { normalizeSchema } from './json-schema.js';

function refusal(schema: unknown): string {
  try {
    normalizeSchema(schema);
  } catch (error) {
    assert.ok(error instanceof KvfenceError);
    assert.equal(error.code, 'invalid_request_error');
    assert.equal(error.param, 'response_format.json_schema.schema');
    return error.message;
  }
  assert.fail(`expected a refusal of ${JSON.stringify(schema)}`);
}

describe('normalizeSchema', () => {
  it('reads the strict-mode subset: objects, arrays, enums, const, anyOf, type arrays, $ref/$defs', () => {
    const n = normalizeSchema({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      description: 'ignored annotation',
      properties: {
        id: { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 },
        tags: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1, maxItems: 3 },
        kind: { type: 'string', enum: ['a', 'b'] },
        fixed: { const: { x: [1, null] } },
        maybe: { type: ['string', 'null'] },
        either: { anyOf: [{ type: 'number' }, { $ref: '#/$defs/leaf' }] },
      },
      required: ['id', 'tags', 'kind', 'fixed', 'maybe'],
      additionalProperties: false,
      $defs: { leaf: { type: 'boolean' } },
    });
    assert.equal(n.root.kind, 'object');
    if (n.root.kind !== 'object') return;
    assert.deepEqual(
      n.root.properties.map((p) => [p.key, p.required, p.value.kind]),
      [
        ['id', true, 'integer'],
        ['tags', true, 'array'],
        ['kind', true, 'literals'],
        ['fixed', true, 'literals'],
        ['maybe', true, 'anyOf'],
        ['either', false, 'anyOf'],
      ],
    );
    assert.deepEqual(n.root.properties[3]!.value, { kind: 'literals', texts: ['{"x":[1,null]}'] });
    assert.deepEqual([...n.defs.keys()], ['#/$defs/leaf']);
  });

  it('an object without properties that allows others is free-form; with none allowed it is {}', () => {
    assert.deepEqual(normalizeSchema({ type: 'object' }).root, { kind: 'freeObject' });
    assert.deepEqual(normalizeSchema({ type: 'object', additionalProperties: false }).root, {
      kind: 'object',
      properties: [],
    });
  });

  it('refuses what it does not enforce, naming the keyword and where it is', () => {
    assert.match(refusal({ type: 'string', pattern: '^a' }), /'pattern' is not supported \(at #\)/);
    assert.match(refusal({ type: 'string', format: 'email' }), /'format'/);
    assert.match(refusal({ oneOf: [{ type: 'string' }] }), /'oneOf'/);
    assert.match(refusal({ allOf: [{ type: 'string' }] }), /'allOf'/);
    assert.match(
      refusal({ type: 'object', properties: { n: { type: 'number', minimum: 0 } } }),
      /'minimum' is not supported .* \(at #\/properties\/n\)/,
    );
    assert.match(refusal({ type: 'array', items: { type: 'string' }, prefixItems: [] }), /'prefixItems'/);
    assert.match(refusal({ type: 'object', patternProperties: {} }), /'patternProperties'/);
    assert.match(refusal({ type: 'object', additionalProperties: { type: 'string' } }), /'additionalProperties'/);
    assert.match(refusal({ type: 'date' }), /the type 'date'/);
    assert.match(refusal({ $ref: 'https://example.com/x.json' }), /'\$ref' https/);
    assert.match(refusal({ $ref: '#/$defs/missing' }), /names no definition/);
    assert.match(refusal({ type: 'object', required: ['x'] }), /'required' names 'x'/);
    assert.match(refusal({ type: 'string', enum: ['a', 1] }), /the value 1 does not have/);
    assert.match(refusal({ type: 'string', maxItems: 2 }), /'maxItems' does not apply to type 'string'/);
    assert.match(refusal({ type: 'array' }), /needs 'items'/);
    assert.match(refusal({ type: 'string', minLength: 5, maxLength: 2 }), /below 'minLength'/);
    // read past, these let answers through that the schema refuses (a fuzz against ajv found each)
    assert.match(refusal({ type: 'string', enum: ['red', 'green'], maxLength: 1 }), /'maxLength' next to 'enum'/);
    assert.match(refusal({ const: 'abc', minLength: 5 }), /'minLength' next to 'enum' or 'const'/);
    assert.match(
      refusal({ type: 'object', properties: { x: { $id: 'http://e.com/x', type: 'null' } } }),
      /'\$id' below the root is not supported \(at #\/properties\/x\)/,
    );
    assert.match(refusal({ type: 'number', exclusiveMaximum: 1e15 }), /'exclusiveMaximum' is not supported/);
    assert.match(refusal({ type: 'number', exclusiveMinimum: -1e15 }), /'exclusiveMinimum' is not supported/);
    assert.doesNotThrow(() => normalizeSchema({ type: 'number', exclusiveMaximum: 1e16, maximum: 1e15 }));
    assert.doesNotThrow(() => normalizeSchema({ $id: 'https://example.com/root', type: 'string', enum: ['a'] }));
    // no finite document: the answer would run to max_tokens, and a mask could lead into it from a finite choice
    const self = { type: 'object', properties: { a: { $ref: '#' } }, required: ['a'], additionalProperties: false };
    assert.match(refusal(self), /a '\$ref' that can never end.* \(at #\)/);
    assert.match(refusal({ type: 'array', items: { $ref: '#' }, minItems: 1 }), /can never end/);
    const mixed = {
      anyOf: [{ type: 'null' }, { $ref: '#/$defs/inf' }],
      $defs: { inf: { type: 'array', items: { $ref: '#/$defs/inf' }, minItems: 1 } },
    };
    assert.match(refusal(mixed), /can never end.* \(at #\/\$defs\/inf\)/);
    // recursion that may stop is fine: an optional self, an array that may be empty, a null alternative
    for (const finite of [
      { type: 'object', properties: { a: { $ref: '#' } }, additionalProperties: false },
      { type: 'array', items: { $ref: '#' } },
      { anyOf: [{ type: 'null' }, { type: 'array', items: { $ref: '#' }, minItems: 1 }] },
    ])
      assert.doesNotThrow(() => normalizeSchema(finite), JSON.stringify(finite));
  });

  it('bounds depth and size', () => {
    let deep: unknown = { type: 'string' };
    for (let i = 0; i < 80; i++) deep = { type: 'array', items: deep };
    assert.match(refusal(deep), /nested deeper than 64/);
    assert.match(refusal({ type: 'array', items: { type: 'string' }, maxItems: 100_000 }), /'maxItems' must be/);
  });
});
