/**
 * A worker's KV and its engine settings, set up the same way by the colocated, prefill and decode workers: the I1
 * proof for its own pool (or a refusal to start with both numbers), the one arena, the optional tenant-scoped prefix
 * cache and the forward pass over them.
 */
import type { Backend } from '../compute/backend.js';
import { ForwardPass } from '../compute/forward.js';
import type { CapacityProof } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import type { PagePool } from '../kv/page-pool.js';
import type { PrefixCache } from '../kv/prefix-cache.js';
import type { LoadedModel } from '../model/load-model.js';
import { grammarCacheFor } from '../structured/grammar-cache.js';
import type { EngineConfig } from './engine-config.js';
import type { EngineParts } from './engine-parts.js';

/** A worker's pool and scheduler bounds, resolved once at startup. */
export interface WorkerSettings {
  pageSize: number;
  pageCount: number;
  /** an operator's cap on the context (below the model's) */
  contextCap?: number;
  /** prove the context that fits instead of refusing to start */
  clampContext: boolean;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  prefillChunkTokens: number;
  stepTokenBudget: number;
  /** a step's prompt tokens are sized to take about this long beside decoders (4x without them) */
  promptStepMs: number;
  /** pages of prompt KV each tenant's prefix cache may hold (0: no prefix cache) */
  prefixCachePages: number;
}

export interface WorkerKv {
  pool: PagePool;
  capacity: CapacityProof;
  forward: ForwardPass;
  prefixCache: PrefixCache | undefined;
}

export function setUpWorkerKv(
  model: LoadedModel,
  backend: Backend,
  settings: WorkerSettings,
  parts: EngineParts,
  /** a prefill or decode worker's own (one that tells its gateways of long passes: cluster/long-pass.ts) */
  forwardPass: (pool: PagePool) => ForwardPass = (pool) => new ForwardPass(model, backend, pool),
): WorkerKv {
  const c = model.config;
  const capacity = parts.capacity({
    modelContext: c.contextLength,
    ...(settings.contextCap !== undefined ? { requestedContext: settings.contextCap } : {}),
    pageCount: settings.pageCount,
    pageSize: settings.pageSize,
    clamp: settings.clampContext,
  });
  const pool = parts.pool(makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, settings.pageSize), settings.pageCount);
  const prefixCache = settings.prefixCachePages > 0 ? parts.prefixCache(pool, settings.prefixCachePages) : undefined;
  return { pool, capacity, forward: forwardPass(pool), prefixCache };
}

/** The engine's own configuration from a worker's settings and its proof. */
export function engineConfigOf(model: LoadedModel, settings: WorkerSettings, provenContext: number): EngineConfig {
  return {
    provenContext,
    vocabSize: model.config.vocabSize,
    runningMax: settings.runningMax,
    waitingMax: settings.waitingMax,
    queueTimeoutMs: settings.queueTimeoutMs,
    prefillChunkTokens: settings.prefillChunkTokens,
    stepTokenBudget: settings.stepTokenBudget,
    promptStepMs: settings.promptStepMs,
    isStopToken: (id) => model.tokenizer.isEndOfGeneration(id),
    grammars: grammarCacheFor(model.tokenizer),
  };
}
