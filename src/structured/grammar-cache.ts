/**
 * Output constraints as requests carry them (plain JSON, so they travel between processes unchanged), and the
 * per-vocabulary cache of their compiled grammars: the same schema from any request reuses one CompiledGrammar and its
 * precomputed masks. Least recently used entries go first past LIMITS.grammarCacheEntriesMax.
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { CompiledGrammar } from './compiled-grammar.js';
import type { Grammar } from './grammar.js';
import { checkJsonDepth, normalizeSchema } from './json-schema.js';
import { jsonObjectGrammar, schemaGrammar } from './schema-grammar.js';
import { TokenIndex, type VocabularySource } from './token-index.js';

/** What the output must be: any JSON object, or a document valid against a JSON Schema. */
export type OutputConstraint = { kind: 'json_object' } | { kind: 'json_schema'; schema: unknown };

export const SCHEMA_PARAM = 'response_format.json_schema.schema';

/** The constraint's grammar, or a 400 KvfenceError naming what is not supported. No vocabulary needed. */
export function constraintGrammar(constraint: OutputConstraint, param = SCHEMA_PARAM): Grammar {
  if (constraint.kind === 'json_object') return jsonObjectGrammar(param);
  checkSchemaSize(constraint.schema, param);
  return schemaGrammar(normalizeSchema(constraint.schema, param), param);
}

/** A schema's nesting and its size as JSON, both bounded before anything is built from it */
export function checkSchemaSize(schema: unknown, param: string): void {
  checkJsonDepth(schema, param);
  const text = JSON.stringify(schema);
  if (text === undefined || Buffer.byteLength(text) > LIMITS.schemaBytesMax)
    throw new KvfenceError('invalid_request_error', `${param}: at most ${LIMITS.schemaBytesMax} bytes of JSON`, param);
}

/** A worker's cache; its token index is built on the first response format (no cost for servers that never see one). */
export function grammarCacheFor(vocab: VocabularySource): GrammarCache {
  return new GrammarCache(() => new TokenIndex(vocab));
}

export class GrammarCache {
  private readonly entries = new Map<string, CompiledGrammar>();
  private indexNow: TokenIndex | undefined;

  constructor(
    private readonly makeIndex: () => TokenIndex,
    private readonly capacity: number = LIMITS.grammarCacheEntriesMax,
  ) {}

  get index(): TokenIndex {
    this.indexNow ??= this.makeIndex();
    return this.indexNow;
  }

  compile(constraint: OutputConstraint): CompiledGrammar {
    if (constraint.kind === 'json_schema') checkJsonDepth(constraint.schema, SCHEMA_PARAM);
    const key = constraint.kind === 'json_object' ? 'json_object' : `schema:${JSON.stringify(constraint.schema)}`;
    let compiled = this.entries.get(key);
    if (compiled !== undefined) {
      this.entries.delete(key); // re-inserted below: most recently used last
    } else {
      compiled = new CompiledGrammar(constraintGrammar(constraint), this.index);
      if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!);
    }
    this.entries.set(key, compiled);
    return compiled;
  }

  get size(): number {
    return this.entries.size;
  }
}
