/** An engine test's model, settings and step loop (src/engine/*.test.ts). */
import assert from 'node:assert/strict';
import type { Engine } from '../../src/engine/engine.js';
import type { EngineConfig } from '../../src/engine/engine-config.js';
import type { EngineEvent, GenerationRequest } from '../../src/engine/request.js';
import { GREEDY } from '../../src/engine/sampler.js';
import { loadTestModel } from './models.js';

export const model = loadTestModel({
  preset: 'tiny',
  arch: 'llama',
  dtype: 'f32',
  seed: 3,
  logitScale: 8,
  contextLength: 256,
});

export function config(overrides: Partial<EngineConfig> = {}): EngineConfig {
  return {
    provenContext: 256,
    vocabSize: model.config.vocabSize,
    runningMax: 8,
    waitingMax: 16,
    queueTimeoutMs: 1000,
    prefillChunkTokens: 7, // odd chunks: prefill spans several steps and mixes with decodes
    stepTokenBudget: 24,
    isStopToken: () => false,
    ...overrides,
  };
}

export function request(
  id: string,
  tenant: string,
  promptLength: number,
  maxTokens: number,
  tenantKvPagesMax = 64,
): GenerationRequest {
  const promptTokens = Array.from({ length: promptLength }, (_, i) => (i * 37 + id.length * 11 + 5) % 500);
  return { id, tenant, promptTokens, maxTokens, sampling: GREEDY, topLogprobs: 2, tenantKvPagesMax };
}

export interface Outcome {
  tokens: number[];
  logprobs: number[];
  end: EngineEvent | undefined;
}

/** Steps until every request ended, collecting each request's tokens; bounded. */
export function runToEnd(
  engine: Engine,
  now = 0,
  stepsMax = 5000,
  onStep?: (step: number) => void,
): Map<string, Outcome> {
  const out = new Map<string, Outcome>();
  const get = (id: string) => out.get(id) ?? out.set(id, { tokens: [], logprobs: [], end: undefined }).get(id)!;
  for (let step = 0; engine.hasWork; step++) {
    assert.ok(step < stepsMax, 'engine finished within the step bound');
    onStep?.(step);
    for (const e of engine.step(now)) {
      if (e.kind === 'token') {
        get(e.request).tokens.push(e.token.id);
        get(e.request).logprobs.push(e.token.logprob);
      } else if (e.kind === 'end') get(e.request).end = e;
      else if (e.kind === 'incident') get(`incident:${e.incident.request}`).end = e;
    }
  }
  return out;
}
