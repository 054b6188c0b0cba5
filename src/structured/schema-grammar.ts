/**
 * A normalized JSON Schema (json-schema.ts) → a Grammar of compact JSON: no whitespace anywhere (as OpenAI's own
 * structured outputs read), so a document has one spelling per value and ends as soon as its last byte is written.
 * Objects, enums, anyOf and literals are written inline into their parent rule's DFA; strings, `$ref`s, array items
 * and free-form values are called rules, so recursion and repetition cost a call edge, not a copy.
 */
import { assertNever } from '../util/assert.js';
import type { Grammar } from './grammar.js';
import { type Fragment, GrammarBuilder } from './grammar-builder.js';
import type { NormalizedSchema, ObjectProperty, SchemaNode } from './json-schema.js';

/** Integer digits at most (no leading zeros): every generated integer part is below 1e15, a safe integer. */
const INTEGER_DIGITS_MAX = 15;
const FRACTION_DIGITS_MAX = 15;

export function schemaGrammar(schema: NormalizedSchema, param: string, workMax?: number): Grammar {
  const b = new GrammarBuilder(param);
  const writer = new SchemaWriter(b, schema);
  const root = b.rule('root', () => writer.value(schema.root));
  return b.build(root, workMax);
}

/** Any JSON object (response_format json_object). */
export function jsonObjectGrammar(param: string): Grammar {
  return schemaGrammar({ root: { kind: 'freeObject' }, defs: new Map() }, param);
}

class SchemaWriter {
  constructor(
    private readonly b: GrammarBuilder,
    private readonly schema: NormalizedSchema,
  ) {}

  value(node: SchemaNode): Fragment {
    const b = this.b;
    switch (node.kind) {
      case 'object':
        return this.object(node.properties);
      case 'freeObject':
        return this.freeObject();
      case 'array': {
        const item = b.rule(`items:${JSON.stringify(node.items)}`, () => this.value(node.items));
        return this.array(item, node.minItems, node.maxItems);
      }
      case 'string':
        return b.call(b.stringRule(node.minLength, node.maxLength));
      case 'number':
        return b.seq(
          this.integer(),
          b.optional(
            b.seq(
              b.literal('.'),
              b.repeat(() => digit(b), 1, FRACTION_DIGITS_MAX),
            ),
          ),
        );
      case 'integer':
        return this.integer();
      case 'boolean':
        return b.alt(b.literal('true'), b.literal('false'));
      case 'null':
        return b.literal('null');
      case 'literals':
        return b.alt(...node.texts.map((t) => b.literal(t)));
      case 'anyOf':
        return b.alt(...node.options.map((o) => this.value(o)));
      case 'ref': {
        const def = this.schema.defs.get(node.name)!;
        return b.call(b.rule(`ref:${node.name}`, () => this.value(def)));
      }
      case 'any':
        return b.call(this.anyRule());
      default:
        return assertNever(node, 'schema node');
    }
  }

  /**
   * Properties in schema order; optional ones may be skipped. Two positions advance property by property: `empty`
   * (nothing written yet: the next key has no comma) and `some` (at least one written); both meet at each value, and
   * every position leads on to the closing brace, so no prefix the grammar allows is a dead end.
   */
  private object(properties: ObjectProperty[]): Fragment {
    const b = this.b;
    const open = b.literal('{');
    let empty: number | undefined = open.end;
    let some: number | undefined;
    for (const p of properties) {
      const key = JSON.stringify(p.key);
      const value = this.value(p.value);
      for (const [from, text] of [
        [empty, `${key}:`],
        [some, `,${key}:`],
      ] as const) {
        if (from === undefined) continue;
        const k = b.literal(text);
        b.epsilon(from, k.start);
        b.epsilon(k.end, value.start);
      }
      if (p.required) {
        empty = undefined;
        some = value.end;
      } else {
        const merged = b.position();
        b.epsilon(value.end, merged);
        if (some !== undefined) b.epsilon(some, merged);
        some = merged;
      }
    }
    const close = b.literal('}');
    if (empty !== undefined) b.epsilon(empty, close.start);
    if (some !== undefined) b.epsilon(some, close.start);
    return { start: open.start, end: close.end };
  }

  private freeObject(): Fragment {
    const b = this.b;
    const member = () => b.seq(b.call(b.stringRule(0, undefined)), b.literal(':'), b.call(this.anyRule()));
    const members = b.optional(
      b.seq(
        member(),
        b.repeat(() => b.seq(b.literal(','), member()), 0, undefined),
      ),
    );
    return b.seq(b.literal('{'), members, b.literal('}'));
  }

  private array(item: number, minItems: number, maxItems: number | undefined): Fragment {
    const b = this.b;
    if (maxItems === 0) return b.literal('[]');
    const more = () => b.seq(b.literal(','), b.call(item));
    const rest = b.repeat(more, Math.max(minItems - 1, 0), maxItems === undefined ? undefined : maxItems - 1);
    const items = b.seq(b.call(item), rest);
    return b.seq(b.literal('['), minItems === 0 ? b.optional(items) : items, b.literal(']'));
  }

  private integer(): Fragment {
    const b = this.b;
    const magnitude = b.alt(
      b.literal('0'),
      b.seq(
        b.bytes(0x31, 0x39),
        b.repeat(() => digit(b), 0, INTEGER_DIGITS_MAX - 1),
      ),
    );
    return b.seq(b.optional(b.literal('-')), magnitude);
  }

  private anyRule(): number {
    const b = this.b;
    return b.rule('any', () => {
      const anyArray = this.array(this.anyRule(), 0, undefined);
      return b.alt(
        this.freeObject(),
        anyArray,
        b.call(b.stringRule(0, undefined)),
        this.value({ kind: 'number' }),
        b.literal('true'),
        b.literal('false'),
        b.literal('null'),
      );
    });
  }
}

function digit(b: GrammarBuilder): Fragment {
  return b.bytes(0x30, 0x39);
}
