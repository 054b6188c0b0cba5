/**
 * The structured-output suite's schemas: the strict-mode subset (nested objects, arrays of objects, enums, const,
 * anyOf, nullable types, $ref/$defs with recursion, optional properties) with bounded strings and arrays, so that even
 * a random-weight model finishes each document within the test's max_tokens.
 */
const str = (maxLength: number, minLength = 0) => ({ type: 'string', minLength, maxLength });
const obj = (properties: Record<string, unknown>, optional: string[] = []) => ({
  type: 'object',
  properties,
  required: Object.keys(properties).filter((k) => !optional.includes(k)),
  additionalProperties: false,
});
const list = (items: unknown, maxItems: number, minItems = 0) => ({ type: 'array', items, minItems, maxItems });

export const SCHEMAS: { name: string; schema: Record<string, unknown> }[] = [
  { name: 'flat', schema: obj({ name: str(8), age: { type: 'integer' }, ok: { type: 'boolean' } }) },
  { name: 'number', schema: obj({ x: { type: 'number' }, y: { type: 'number' } }) },
  {
    name: 'nullable',
    schema: obj({ a: { type: ['string', 'null'], maxLength: 4 }, b: { type: ['integer', 'null'] } }),
  },
  { name: 'enum', schema: obj({ color: { enum: ['red', 'green', 'blue'] }, size: { enum: [1, 2, 3] } }) },
  { name: 'const', schema: obj({ version: { const: 'v1' }, flags: { const: [true, null] } }) },
  { name: 'nested', schema: obj({ user: obj({ id: { type: 'integer' }, profile: obj({ nick: str(6) }) }) }) },
  { name: 'array-of-strings', schema: obj({ tags: list(str(5), 3, 1) }) },
  { name: 'array-of-objects', schema: obj({ items: list(obj({ sku: str(4), qty: { type: 'integer' } }), 3, 1) }) },
  { name: 'array-of-enums', schema: obj({ days: list({ enum: ['mon', 'tue', 'wed'] }, 4) }) },
  { name: 'anyOf-primitives', schema: obj({ v: { anyOf: [{ type: 'integer' }, str(3), { type: 'null' }] } }) },
  {
    name: 'anyOf-objects',
    schema: obj({
      shape: {
        anyOf: [
          obj({ kind: { const: 'circle' }, r: { type: 'number' } }),
          obj({ kind: { const: 'square' }, side: { type: 'integer' } }),
        ],
      },
    }),
  },
  {
    name: 'ref-defs',
    schema: {
      ...obj({ home: { $ref: '#/$defs/address' }, work: { $ref: '#/$defs/address' } }),
      $defs: { address: obj({ city: str(6), zip: str(5, 1) }) },
    },
  },
  {
    name: 'ref-recursive',
    schema: {
      $defs: { node: obj({ value: { type: 'integer' }, children: list({ $ref: '#/$defs/node' }, 2) }) },
      $ref: '#/$defs/node',
    },
  },
  {
    name: 'ref-root-recursion',
    schema: obj({ label: str(3), next: { anyOf: [{ type: 'null' }, { $ref: '#' }] } }),
  },
  { name: 'optional', schema: obj({ a: { type: 'integer' }, b: str(3), c: { type: 'boolean' } }, ['b', 'c']) },
  { name: 'all-optional', schema: obj({ p: { type: 'integer' }, q: { type: 'integer' } }, ['p', 'q']) },
  { name: 'empty-object', schema: obj({}) },
  { name: 'root-array', schema: list(obj({ k: str(2) }), 2, 1) },
  { name: 'root-enum', schema: { enum: ['yes', 'no', 'maybe'] } },
  { name: 'root-string', schema: str(10, 2) },
  { name: 'root-integer', schema: { type: 'integer' } },
  { name: 'matrix', schema: obj({ rows: list(list({ type: 'integer' }, 3, 1), 3, 1) }) },
  { name: 'min-length', schema: obj({ code: str(6, 6) }) },
  { name: 'unicode-enum', schema: obj({ word: { enum: ['café', 'naïve', '日本', '😀'] } }) },
  {
    name: 'deep',
    schema: obj({ a: obj({ b: obj({ c: obj({ d: obj({ e: { type: 'boolean' } }) }) }) }) }),
  },
  {
    name: 'event',
    schema: obj({
      title: str(10),
      when: obj({ day: { type: 'integer' }, month: { enum: ['jan', 'feb', 'mar'] } }),
      attendees: list(obj({ name: str(6), rsvp: { enum: ['yes', 'no'] } }), 2),
    }),
  },
  {
    name: 'union-with-arrays',
    schema: obj({ data: { anyOf: [list({ type: 'integer' }, 3), obj({ err: str(8) })] } }),
  },
  {
    name: 'described',
    schema: {
      title: 'Described',
      description: 'annotations are accepted and change nothing',
      ...obj({ score: { type: 'number', description: 'a score' }, note: { ...str(6), title: 'note' } }),
    },
  },
  {
    name: 'definitions-keyword',
    schema: {
      ...obj({ p: { $ref: '#/definitions/pt' } }),
      definitions: { pt: obj({ x: { type: 'integer' }, y: { type: 'integer' } }) },
    },
  },
  {
    name: 'tree-of-unions',
    schema: {
      $defs: {
        leaf: obj({ num: { type: 'integer' } }),
        expr: {
          anyOf: [
            { $ref: '#/$defs/leaf' },
            obj({ op: { enum: ['+', '*'] }, args: list({ $ref: '#/$defs/leaf' }, 2, 1) }),
          ],
        },
      },
      ...obj({ root: { $ref: '#/$defs/expr' }, more: list({ $ref: '#/$defs/expr' }, 2) }),
    },
  },
  {
    name: 'nullable-object',
    schema: obj({ owner: { anyOf: [obj({ id: { type: 'integer' } }), { type: 'null' }] }, count: { type: 'integer' } }),
  },
  {
    name: 'mixed-optional-nested',
    schema: obj(
      {
        id: { type: 'integer' },
        meta: obj({ tag: str(4), active: { type: 'boolean' } }, ['active']),
        scores: list({ type: 'number' }, 2),
      },
      ['meta'],
    ),
  },
];
