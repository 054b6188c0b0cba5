/**
 * Output constraints as requests carry them (plain JSON, so they travel between processes unchanged), and the
 * per-vocabulary cache of their compiled grammars: the same schema from the same tenant reuses one CompiledGrammar and
 * the masks it has computed. Entries are the tenant's own (I9): a schema is the tenant's data, and a hit answers
 * faster than a compile, so a cache shared across tenants would let one time whether another had sent a schema. A
 * tenant past LIMITS.grammarCacheEntriesPerTenant gives up its own least recently used entry; past
 * LIMITS.grammarCacheEntriesMax in all, the least recently used entry of anyone goes (as the prefix cache's pool does).
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { CompiledGrammar } from './compiled-grammar.js';
import type { Grammar } from './grammar.js';
import { GrammarThread } from './grammar-thread.js';
import { checkJsonDepth, normalizeSchema } from './json-schema.js';
import { jsonObjectGrammar, schemaGrammar } from './schema-grammar.js';
import { TokenIndex, type VocabularySource } from './token-index.js';

/** What the output must be: any JSON object, or a document valid against a JSON Schema. */
export type OutputConstraint = { kind: 'json_object' } | { kind: 'json_schema'; schema: unknown };

export const SCHEMA_PARAM = 'response_format.json_schema.schema';

/**
 * The constraint's grammar, or a 400 KvfenceError naming what is not supported (or the schema too complex: past
 * `workMax` steps of its construction, LIMITS.grammarWorkMax unless given). No vocabulary needed.
 */
export function constraintGrammar(constraint: OutputConstraint, param = SCHEMA_PARAM, workMax?: number): Grammar {
  if (constraint.kind === 'json_object') return jsonObjectGrammar(param);
  checkSchemaSize(constraint.schema, param);
  return schemaGrammar(normalizeSchema(constraint.schema, param), param, workMax);
}

/** A constraint whose grammar must build before a request is served, and the request field it came from */
export interface GrammarCheck {
  constraint: OutputConstraint;
  param: string;
}

/** An output constraint and the grammar builds that check it (the first covers the rest: checkGrammars) */
export interface ConstrainedOutput {
  constraint: OutputConstraint;
  checks: readonly GrammarCheck[];
}

/**
 * Builds the first check's grammar, for its 400 alone (the engine compiles its own): it covers the rest, whose schemas
 * are only read (normalized, not built) when it fails, to name the field at fault (the first of them refused; else the
 * first's own error). At most LIMITS.grammarWorkMax of building a request, however many checks: the gateway runs this
 * on its grammar-check thread, where each tenant's turns are bounded, and a failed forced choice over many tools must
 * not build each tool's grammar (~0.1–0.2 s each) before it answers.
 */
export function checkGrammars(checks: readonly GrammarCheck[]): void {
  const [first, ...rest] = checks;
  if (first === undefined) return;
  try {
    constraintGrammar(first.constraint, first.param);
  } catch (error) {
    for (const { constraint, param } of rest) {
      if (constraint.kind === 'json_object') continue;
      checkSchemaSize(constraint.schema, param);
      normalizeSchema(constraint.schema, param);
    }
    throw error;
  }
}

/**
 * Each schema object's part of its cache key, written once: a request's preparation and each of its n samplers ask
 * for it, and the walk and the JSON of a 256 KiB schema cost ~0.6 ms each time on the engine's thread.
 */
const schemaKeys = new WeakMap<object, string>();

/** The cache's key: the tenant's own entry for the constraint (a schema's nesting is checked before it is written). */
function keyOf(constraint: OutputConstraint, tenant: string): string {
  if (constraint.kind === 'json_object') return `${tenant}\0json_object`;
  const { schema } = constraint;
  const object = typeof schema === 'object' && schema !== null ? schema : undefined;
  let key = object === undefined ? undefined : schemaKeys.get(object);
  if (key === undefined) {
    checkJsonDepth(schema, SCHEMA_PARAM);
    key = `schema:${JSON.stringify(schema)}`;
    if (object !== undefined) schemaKeys.set(object, key);
  }
  return `${tenant}\0${key}`;
}

/**
 * A schema's nesting and its size as JSON, both bounded before anything is built from it; its size as JSON and in
 * objects and arrays
 */
export function checkSchemaSize(schema: unknown, param: string): { bytes: number; nodes: number } {
  const nodes = checkJsonDepth(schema, param);
  const text = JSON.stringify(schema);
  const bytes = text === undefined ? Number.POSITIVE_INFINITY : Buffer.byteLength(text);
  if (bytes > LIMITS.schemaBytesMax)
    throw new KvfenceError('invalid_request_error', `${param}: at most ${LIMITS.schemaBytesMax} bytes of JSON`, param);
  return { bytes, nodes };
}

/**
 * A worker's cache, its token index and string scans built now, before the worker serves: built at the first response
 * format, on the engine's thread, they held every tenant's stream for 0.4–1.3 s with a real vocabulary (Llama 3's
 * 128k tokens, Qwen 3's 152k). They cost that once at start and ~20 MB.
 */
export function grammarCacheFor(vocab: VocabularySource): GrammarCache {
  const index = new TokenIndex(vocab);
  index.scanStrings();
  return new GrammarCache(index);
}

export class GrammarCache {
  /** by `${tenant}\0${constraint}`, least recently used first */
  private readonly entries = new Map<string, { tenant: string; compiled: CompiledGrammar }>();
  private readonly tenantEntries = new Map<string, number>();
  private thread: GrammarThread | undefined;

  constructor(
    readonly index: TokenIndex,
    private readonly capacity: number = LIMITS.grammarCacheEntriesMax,
    private readonly perTenant: number = LIMITS.grammarCacheEntriesPerTenant,
  ) {}

  /**
   * `tenant`'s compiled grammar for `constraint`: its own cached one, or a new one built here. An engine builds none
   * (GrammarWaits, engine/grammar-waits.ts, has it built on the grammar thread first), only tests do.
   */
  compile(constraint: OutputConstraint, tenant: string): CompiledGrammar {
    const key = keyOf(constraint, tenant);
    const cached = this.entries.get(key);
    if (cached !== undefined) {
      this.entries.delete(key); // re-inserted: most recently used last
      this.entries.set(key, cached);
      return cached.compiled;
    }
    return this.insert(key, tenant, constraintGrammar(constraint));
  }

  /**
   * Has `tenant`'s grammar for `constraint` built off this thread (grammar-thread.ts) and cached, then calls `done`
   * (with the build's error when it failed; never at once), so that `compile` finds it if called before anything else
   * runs. Undefined when it is cached already (`done` is not called); else a function that withdraws the call. Throws
   * (nothing queued) past the thread's bounds.
   */
  prepare(
    constraint: OutputConstraint,
    tenant: string,
    timeoutMs: number,
    done: (error?: KvfenceError) => void,
  ): (() => void) | undefined {
    const key = keyOf(constraint, tenant);
    if (this.entries.has(key)) return undefined;
    this.thread ??= new GrammarThread((built, owner, grammar) => {
      if (!this.entries.has(built)) this.insert(built, owner, grammar);
    });
    return this.thread.build(key, tenant, constraint, timeoutMs, (result) =>
      done(result instanceof KvfenceError ? result : undefined),
    );
  }

  /** Ends the grammar thread, if one was started. */
  async close(): Promise<void> {
    await this.thread?.close();
  }

  private insert(key: string, tenant: string, grammar: Grammar): CompiledGrammar {
    const compiled = new CompiledGrammar(grammar, this.index);
    if ((this.tenantEntries.get(tenant) ?? 0) >= this.perTenant) this.evict((e) => e.tenant === tenant);
    else if (this.entries.size >= this.capacity) this.evict(() => true);
    this.entries.set(key, { tenant, compiled });
    this.tenantEntries.set(tenant, (this.tenantEntries.get(tenant) ?? 0) + 1);
    return compiled;
  }

  /** Drops the least recently used entry that `which` picks. */
  private evict(which: (entry: { tenant: string }) => boolean): void {
    for (const [key, entry] of this.entries) {
      if (!which(entry)) continue;
      this.entries.delete(key);
      const left = this.tenantEntries.get(entry.tenant)! - 1;
      if (left === 0) this.tenantEntries.delete(entry.tenant);
      else this.tenantEntries.set(entry.tenant, left);
      return;
    }
  }

  get size(): number {
    return this.entries.size;
  }
}
