/**
 * A JSON Schema (the subset OpenAI's strict structured outputs accept, plus string and array length bounds) → a small
 * normalized tree the grammar builder reads. Anything outside the subset is a 400 naming the keyword, never ignored:
 * a keyword we do not enforce would let the output break the caller's schema.
 *
 *   object   properties, required, additionalProperties   (properties are generated in schema order; properties not
 *            listed in `required` may be left out; undeclared properties are never generated)
 *   array    items, minItems, maxItems
 *   string   minLength, maxLength (counted in code points, as JSON Schema does)
 *   number, integer, boolean, null; enum, const; anyOf; type arrays (["string", "null"]); $ref to #, #/$defs/…,
 *   #/definitions/…; annotations (description, title, examples, default, …) are accepted and have no effect.
 *
 * Numbers are generated in plain notation with at most 15 integer digits and 15 fraction digits (no exponent), so every
 * generated number is exactly representable as a safe integer part; `minimum`/`maximum` are accepted only when they do
 * not narrow that range (zod writes the safe-integer bounds on every `.int()`), otherwise refused.
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export type SchemaNode =
  | { kind: 'object'; properties: ObjectProperty[] }
  /** an object with any members (no declared properties, additional properties allowed) */
  | { kind: 'freeObject' }
  | { kind: 'array'; items: SchemaNode; minItems: number; maxItems: number | undefined }
  | { kind: 'string'; minLength: number; maxLength: number | undefined }
  | { kind: 'number' }
  | { kind: 'integer' }
  | { kind: 'boolean' }
  | { kind: 'null' }
  /** enum / const: each value's compact JSON text */
  | { kind: 'literals'; texts: string[] }
  | { kind: 'anyOf'; options: SchemaNode[] }
  | { kind: 'ref'; name: string }
  /** any JSON value (the empty schema) */
  | { kind: 'any' };

export interface ObjectProperty {
  key: string;
  required: boolean;
  value: SchemaNode;
}

export interface NormalizedSchema {
  root: SchemaNode;
  /** referenced definitions by name ('#' is the root itself) */
  defs: Map<string, SchemaNode>;
}

/** JSON nesting a schema may have (each schema level is at most a few JSON levels: properties, anyOf, items). */
export const JSON_DEPTH_MAX = 4 * LIMITS.schemaDepthMax;

/**
 * Throws a 400 when a JSON value nests deeper than JSON_DEPTH_MAX. Iterative: checked before anything recursive
 * (JSON.stringify, the schema reader) meets the value, so no input can overflow the stack. Returns how many objects
 * and arrays it holds.
 */
export function checkJsonDepth(value: unknown, param: string): number {
  const stack: [unknown, number][] = [[value, 0]];
  let containers = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= JSON_DEPTH_MAX)
      throw new KvfenceError('invalid_request_error', `${param}: nested deeper than ${JSON_DEPTH_MAX}`, param);
    containers++;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return containers;
}

/** Larger magnitudes than the number grammar can write; bounds at or beyond these do not narrow it. */
export const GENERATED_NUMBER_ABS_MAX = 1e15;

const ANNOTATIONS = new Set([
  'description',
  'title',
  '$schema',
  '$id',
  '$comment',
  'examples',
  'default',
  'deprecated',
  'readOnly',
  'writeOnly',
  'strict',
]);
const TYPE_KEYWORDS: Record<string, readonly string[]> = {
  object: ['properties', 'required', 'additionalProperties'],
  array: ['items', 'minItems', 'maxItems'],
  string: ['minLength', 'maxLength'],
  number: ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  integer: ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  boolean: [],
  null: [],
};
const COMBINING = new Set(['type', 'enum', 'const', 'anyOf', '$ref', '$defs', 'definitions']);

type Json = Record<string, unknown>;

/** Normalizes a schema or throws a 400 KvfenceError whose message names the offending keyword and its path. */
export function normalizeSchema(schema: unknown, param = 'response_format.json_schema.schema'): NormalizedSchema {
  const reader = new SchemaReader(param);
  const root = reader.node(schema, '#', 0);
  reader.resolveRefs();
  if (reader.defs.has('#')) reader.defs.set('#', root);
  const endless = endlessDefinition(root, reader.defs);
  if (endless !== undefined) {
    reader.fail(
      endless,
      "a '$ref' that can never end: every document it allows contains itself, so the answer could start one and " +
        'never finish it',
    );
  }
  return { root, defs: reader.defs };
}

/**
 * A definition the schema reaches that has no finite document (an object that must contain itself, an array that
 * must hold one of itself), if any. Only a reference can make a schema endless, so the definitions are what is
 * checked: whether each can finish is a least fixpoint (none can, until one is seen to).
 */
function endlessDefinition(root: SchemaNode, defs: ReadonlyMap<string, SchemaNode>): string | undefined {
  const finishes = new Map<string, boolean>([...defs.keys()].map((name) => [name, false]));
  const can = (node: SchemaNode): boolean => {
    switch (node.kind) {
      case 'object':
        return node.properties.every((p) => !p.required || can(p.value));
      case 'array':
        return node.minItems === 0 || can(node.items);
      case 'anyOf':
        return node.options.some(can);
      case 'ref':
        return finishes.get(node.name) === true;
      default:
        return true;
    }
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (const [name, node] of defs) {
      if (finishes.get(name) !== true && can(node)) {
        finishes.set(name, true);
        changed = true;
      }
    }
  }
  // the definitions the root reaches (a stack, not recursion: a chain of references can be long)
  const reached = new Set<string>();
  const stack: SchemaNode[] = [root];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    if (node.kind === 'object') stack.push(...node.properties.map((p) => p.value));
    else if (node.kind === 'array') stack.push(node.items);
    else if (node.kind === 'anyOf') stack.push(...node.options);
    else if (node.kind === 'ref' && !reached.has(node.name)) {
      reached.add(node.name);
      stack.push(defs.get(node.name)!);
    }
  }
  return [...reached].find((name) => finishes.get(name) !== true);
}

class SchemaReader {
  readonly defs = new Map<string, SchemaNode>();
  private readonly pendingRefs: { name: string; path: string }[] = [];
  private nodeCount = 0;

  constructor(private readonly param: string) {}

  fail(path: string, why: string): never {
    throw new KvfenceError('invalid_request_error', `${this.param}: ${why} (at ${path})`, this.param);
  }

  node(value: unknown, path: string, depth: number): SchemaNode {
    if (++this.nodeCount > LIMITS.schemaNodesMax) this.fail(path, `more than ${LIMITS.schemaNodesMax} schema nodes`);
    if (depth > LIMITS.schemaDepthMax) this.fail(path, `nested deeper than ${LIMITS.schemaDepthMax}`);
    if (value === true) return { kind: 'any' };
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      this.fail(path, 'a schema must be an object');
    const s = value as Json;
    for (const key of Object.keys(s)) {
      if (ANNOTATIONS.has(key) || COMBINING.has(key)) continue;
      if (Object.values(TYPE_KEYWORDS).some((keys) => keys.includes(key))) continue;
      this.fail(path, `the keyword '${key}' is not supported`);
    }
    // below the root an '$id' starts a new base for every '$ref' inside it, which '#…' references here ignore
    if (depth > 0 && s['$id'] !== undefined) this.fail(path, "'$id' below the root is not supported");
    if (depth === 0) this.readDefs(s, path);
    else if (s['$defs'] !== undefined || s['definitions'] !== undefined)
      this.fail(path, "'$defs' is only supported at the root");
    if (s['$ref'] !== undefined) return this.ref(s, path);
    if (s['anyOf'] !== undefined) return this.anyOf(s, path, depth);
    if (s['enum'] !== undefined || s['const'] !== undefined) return this.literals(s, path);
    const type = s['type'];
    if (type === undefined) {
      const typed = Object.keys(s).find((k) => !ANNOTATIONS.has(k) && k !== '$defs' && k !== 'definitions');
      if (typed !== undefined) this.fail(path, `'${typed}' needs a 'type'`);
      return { kind: 'any' };
    }
    if (Array.isArray(type)) {
      if (type.length === 0 || type.length > 7) this.fail(path, "'type' must name 1 to 7 types");
      const options = type.map((t) => this.typed(s, String(t), path, depth));
      return options.length === 1 ? options[0]! : { kind: 'anyOf', options };
    }
    if (typeof type !== 'string') this.fail(path, "'type' must be a string or an array of strings");
    return this.typed(s, type, path, depth);
  }

  resolveRefs(): void {
    for (const { name, path } of this.pendingRefs) {
      if (!this.defs.has(name)) this.fail(path, `'$ref' ${name} names no definition`);
    }
  }

  private readDefs(s: Json, path: string): void {
    for (const key of ['$defs', 'definitions'] as const) {
      const defs = s[key];
      if (defs === undefined) continue;
      if (typeof defs !== 'object' || defs === null || Array.isArray(defs))
        this.fail(path, `'${key}' must be an object`);
      for (const [name, def] of Object.entries(defs)) {
        const ref = `#/${key}/${escapePointer(name)}`;
        this.defs.set(ref, this.node(def, ref, 1));
      }
    }
  }

  private ref(s: Json, path: string): SchemaNode {
    const ref = s['$ref'];
    if (typeof ref !== 'string') this.fail(path, "'$ref' must be a string");
    const extra = Object.keys(s).find(
      (k) => k !== '$ref' && !ANNOTATIONS.has(k) && k !== '$defs' && k !== 'definitions',
    );
    if (extra !== undefined) this.fail(path, `'${extra}' next to '$ref' is not supported`);
    if (ref === '#') {
      if (!this.defs.has('#')) this.defs.set('#', { kind: 'any' }); // replaced by the root once it is read
    } else if (!/^#\/(\$defs|definitions)\/[^/]+$/.test(ref)) {
      this.fail(path, `'$ref' ${ref} is not supported (only #, #/$defs/NAME and #/definitions/NAME)`);
    }
    this.pendingRefs.push({ name: ref, path });
    return { kind: 'ref', name: ref };
  }

  private anyOf(s: Json, path: string, depth: number): SchemaNode {
    const options = s['anyOf'];
    if (!Array.isArray(options) || options.length === 0) this.fail(path, "'anyOf' must be a non-empty array");
    if (options.length > LIMITS.schemaOptionsMax) this.fail(path, `'anyOf' has more than ${LIMITS.schemaOptionsMax}`);
    const beside = Object.keys(s).find(
      (k) => k !== 'anyOf' && !ANNOTATIONS.has(k) && k !== '$defs' && k !== 'definitions',
    );
    if (beside !== undefined) this.fail(path, `'${beside}' next to 'anyOf' is not supported`);
    return { kind: 'anyOf', options: options.map((o, i) => this.node(o, `${path}/anyOf/${i}`, depth + 1)) };
  }

  private literals(s: Json, path: string): SchemaNode {
    // the literals are the whole answer: a keyword beside them (maxLength, properties…) would narrow it, so it is
    // refused rather than read past
    const beside = Object.keys(s).find(
      (k) => !ANNOTATIONS.has(k) && !['type', 'enum', 'const', '$defs', 'definitions'].includes(k),
    );
    if (beside !== undefined) this.fail(path, `'${beside}' next to 'enum' or 'const' is not supported`);
    const values = s['const'] !== undefined ? [s['const']] : s['enum'];
    if (s['const'] !== undefined && s['enum'] !== undefined) this.fail(path, "'enum' and 'const' together");
    if (!Array.isArray(values) || values.length === 0) this.fail(path, "'enum' must be a non-empty array");
    if (values.length > LIMITS.schemaOptionsMax) this.fail(path, `'enum' has more than ${LIMITS.schemaOptionsMax}`);
    const type = s['type'];
    const types = type === undefined ? undefined : Array.isArray(type) ? type : [type];
    const texts = values.map((v) => {
      if (types !== undefined && !types.some((t) => matchesType(v, String(t))))
        this.fail(path, `the value ${JSON.stringify(v)} does not have the schema's 'type'`);
      return JSON.stringify(v);
    });
    return { kind: 'literals', texts: [...new Set(texts)] };
  }

  private typed(s: Json, type: string, path: string, depth: number): SchemaNode {
    const allowed = TYPE_KEYWORDS[type];
    if (allowed === undefined) this.fail(path, `the type '${type}' is not supported`);
    for (const [t, keys] of Object.entries(TYPE_KEYWORDS)) {
      if (t === type || (Array.isArray(s['type']) && s['type'].includes(t))) continue;
      const stray = keys.find((k) => s[k] !== undefined && !allowed.includes(k));
      if (stray !== undefined) this.fail(path, `'${stray}' does not apply to type '${type}'`);
    }
    switch (type) {
      case 'object':
        return this.object(s, path, depth);
      case 'array': {
        const items = s['items'];
        const minItems = this.count(s, 'minItems', path, LIMITS.schemaArrayItemsMax) ?? 0;
        const maxItems = this.count(s, 'maxItems', path, LIMITS.schemaArrayItemsMax);
        if (maxItems !== undefined && maxItems < minItems) this.fail(path, "'maxItems' is below 'minItems'");
        if (items === undefined) this.fail(path, "an array needs 'items'");
        return { kind: 'array', items: this.node(items, `${path}/items`, depth + 1), minItems, maxItems };
      }
      case 'string': {
        const minLength = this.count(s, 'minLength', path, LIMITS.schemaStringLengthMax) ?? 0;
        const maxLength = this.count(s, 'maxLength', path, LIMITS.schemaStringLengthMax);
        if (maxLength !== undefined && maxLength < minLength) this.fail(path, "'maxLength' is below 'minLength'");
        return { kind: 'string', minLength, maxLength };
      }
      case 'number':
      case 'integer':
        this.numericBounds(s, path);
        return { kind: type };
      case 'boolean':
        return { kind: 'boolean' };
      default:
        return { kind: 'null' };
    }
  }

  private object(s: Json, path: string, depth: number): SchemaNode {
    const properties = s['properties'] ?? {};
    if (typeof properties !== 'object' || properties === null || Array.isArray(properties))
      this.fail(path, "'properties' must be an object");
    const required = s['required'] ?? [];
    if (!Array.isArray(required) || !required.every((r) => typeof r === 'string'))
      this.fail(path, "'required' must be an array of strings");
    const names = Object.keys(properties);
    if (names.length > LIMITS.schemaPropertiesMax)
      this.fail(path, `more than ${LIMITS.schemaPropertiesMax} properties`);
    const missing = required.find((r) => !names.includes(r));
    if (missing !== undefined) this.fail(path, `'required' names '${missing}', which is not in 'properties'`);
    const additional = s['additionalProperties'];
    if (additional !== undefined && typeof additional !== 'boolean' && !isEmptySchema(additional))
      this.fail(path, "'additionalProperties' must be false, true or {}");
    if (names.length === 0 && additional !== false) return { kind: 'freeObject' };
    return {
      kind: 'object',
      properties: names.map((key) => ({
        key,
        required: required.includes(key),
        value: this.node((properties as Json)[key], `${path}/properties/${escapePointer(key)}`, depth + 1),
      })),
    };
  }

  private count(s: Json, key: string, path: string, max: number): number | undefined {
    const v = s[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
      this.fail(path, `'${key}' must be an integer from 0 to ${max}`);
    return v;
  }

  private numericBounds(s: Json, path: string): void {
    // the largest number the grammar writes rounds to ±1e15 itself: an exclusive bound there must lie beyond it
    const at = (v: unknown, exclusive: boolean, sign: 1 | -1) =>
      typeof v === 'number' && (exclusive ? sign * v > GENERATED_NUMBER_ABS_MAX : sign * v >= GENERATED_NUMBER_ABS_MAX);
    for (const [key, exclusive] of [
      ['minimum', false],
      ['exclusiveMinimum', true],
    ] as const) {
      const v = s[key];
      if (v !== undefined && !at(v, exclusive, -1))
        this.fail(
          path,
          `'${key}' is not supported (only bounds ${exclusive ? 'below' : 'at or below'} -${GENERATED_NUMBER_ABS_MAX})`,
        );
    }
    for (const [key, exclusive] of [
      ['maximum', false],
      ['exclusiveMaximum', true],
    ] as const) {
      const v = s[key];
      if (v !== undefined && !at(v, exclusive, 1))
        this.fail(
          path,
          `'${key}' is not supported (only bounds ${exclusive ? 'above' : 'at or above'} ${GENERATED_NUMBER_ABS_MAX})`,
        );
    }
  }
}

function isEmptySchema(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).length === 0;
}

function escapePointer(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}

function matchesType(value: unknown, type: string): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'string':
      return typeof value === 'string';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    default:
      return false;
  }
}
