/**
 * The components a worker builds its engine from. Workers take them as a dependency so that a test can hand in a
 * subclass with a seeded fault (test/mutants/) or a benchmark one with its checks off (bench/), while production code
 * has no option, flag or variable that changes them: it always uses ENGINE_PARTS.
 */
import type { ForwardPass } from '../compute/forward.js';
import { type CapacityInput, type CapacityProof, proveCapacity } from '../kv/capacity.js';
import type { KvLayout } from '../kv/kv-layout.js';
import { PagePool } from '../kv/page-pool.js';
import { PrefixCache } from '../kv/prefix-cache.js';
import { Engine, type EngineOptions } from './engine.js';
import type { EngineConfig } from './engine-config.js';

export interface EngineParts {
  /** I1 for the worker's pool (a test of the 2026 incident forges an unproven one here, and only here) */
  capacity(input: CapacityInput): CapacityProof;
  pool(layout: KvLayout, pageCount: number): PagePool;
  prefixCache(pool: PagePool, pagesPerTenant: number): PrefixCache;
  engine(config: EngineConfig, forward: ForwardPass, options: EngineOptions): Engine;
}

export const ENGINE_PARTS: EngineParts = {
  capacity: proveCapacity,
  pool: (layout, pageCount) => new PagePool(layout, pageCount),
  prefixCache: (pool, pagesPerTenant) => new PrefixCache(pool, pagesPerTenant),
  engine: (config, forward, options) => new Engine(config, forward, options),
};
