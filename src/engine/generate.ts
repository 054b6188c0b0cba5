/**
 * One sequence from prompt to answer over the batched forward pass: chunked prefill, then decode one token a step.
 * The serving scheduler (continuous batching) runs many such sequences at once; this is the single-stream path used by
 * `kvfence generate` and by tests that compare against llama.cpp.
 */
import { randomUUID } from 'node:crypto';
import type { ForwardPass } from '../compute/forward.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import { newPageTable } from '../kv/page-table.js';
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { logSoftmax, Sampler, type SamplingParams, SamplingScratch, unsampleable } from './sampler.js';

export interface GenerateOptions {
  maxTokens: number;
  sampling: SamplingParams;
  /** prompt tokens per prefill forward call */
  prefillChunkTokens: number;
  /** generation stops before emitting a token for which this returns true */
  isStopToken: (id: number) => boolean;
  onToken?: (id: number, logprob: number) => void;
}

export interface GenerateResult {
  promptTokens: number[];
  tokens: number[];
  logprobs: number[];
  finishReason: 'stop' | 'length';
  prefillMs: number;
  decodeMs: number;
}

export function generate(forward: ForwardPass, prompt: readonly number[], options: GenerateOptions): GenerateResult {
  const { contextLength } = forward.model.config;
  const { maxTokens, prefillChunkTokens } = options;
  assert(prefillChunkTokens >= 1, 'prefill chunks need at least one token');
  if (prompt.length === 0) throw new KvfenceError('invalid_request_error', 'the prompt is empty');
  if (maxTokens < 1 || maxTokens > LIMITS.generateTokensMax) {
    throw new KvfenceError(
      'invalid_request_error',
      `max tokens ${maxTokens} must be between 1 and ${LIMITS.generateTokensMax}`,
    );
  }
  // I2: reject before any page is touched.
  if (prompt.length + maxTokens > contextLength) {
    throw new KvfenceError(
      'context_length_exceeded',
      `prompt (${prompt.length} tokens) + max tokens (${maxTokens}) = ${prompt.length + maxTokens} exceeds the context of ${contextLength} tokens`,
    );
  }
  const table = newPageTable({ tenant: 'local', request: randomUUID() });
  const pool = forward.pool;
  if (!pool.grow(table, pagesForTokens(pool.layout, prompt.length + maxTokens))) {
    throw new KvfenceError(
      'kv_capacity_exceeded',
      `the KV pool has ${pool.freePageCount} free pages, too few for this request`,
    );
  }
  try {
    const sampler = new Sampler(options.sampling);
    const started = performance.now();
    let logits: Float32Array | undefined;
    let scratch: SamplingScratch | undefined; // one for the whole run, not one per token
    for (let at = 0; at < prompt.length; at += prefillChunkTokens) {
      const chunk = prompt.slice(at, at + prefillChunkTokens);
      const last = at + chunk.length >= prompt.length;
      logits = runOne(forward, { table, tokens: chunk, logits: last ? 'last' : 'none' });
    }
    const prefillMs = performance.now() - started;
    const tokens: number[] = [];
    const logprobs: number[] = [];
    let finishReason: GenerateResult['finishReason'] = 'length';
    while (tokens.length < maxTokens) {
      assert(logits !== undefined, 'logits after prefill');
      const error = unsampleable(logits);
      if (error !== undefined) throw error;
      scratch ??= new SamplingScratch(logits.length);
      const id = sampler.sample(logits, scratch);
      if (options.isStopToken(id)) {
        finishReason = 'stop';
        break;
      }
      const logprob = logSoftmax(logits)[id]!;
      tokens.push(id);
      logprobs.push(logprob);
      options.onToken?.(id, logprob);
      if (tokens.length === maxTokens) break;
      logits = runOne(forward, { table, tokens: [id], logits: 'last' });
    }
    return {
      promptTokens: [...prompt],
      tokens,
      logprobs,
      finishReason,
      prefillMs,
      decodeMs: performance.now() - started - prefillMs,
    };
  } finally {
    pool.releaseAll(table);
  }
}

function runOne(forward: ForwardPass, input: Parameters<ForwardPass['run']>[0][number]): Float32Array {
  const [out] = forward.run([input]);
  assert(out !== undefined, 'one output per input');
  if (!out.ok) throw out.error;
  return out.logits;
}
