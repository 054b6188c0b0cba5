/** What the benchmark workers receive and report; shared by run.ts and both workers. */
import type { GenerationRequest } from '../src/engine/request.js';
import { GREEDY } from '../src/engine/sampler.js';
import type { ModelFileType } from '../src/model/quant-mix.js';
import type { TestPreset } from '../src/model/test-model.js';

export interface BenchModel {
  preset: TestPreset;
  /** a weight type or a llama-quantize mix (src/model/quant-mix.ts) */
  dtype: ModelFileType;
}

export interface BenchJob {
  modelPath: string;
  vocabSize: number;
  threadCount: number;
  /** repetitions of each measurement in this worker */
  repetitions: number;
  promptTokens: number;
  decodeTokens: number;
  /** kvfence only: prompt tokens per prefill forward call */
  prefillChunkTokens: number;
  streamCounts: number[];
  /** aggregate decode: steps timed per stream count */
  aggregateSteps: number;
  /** kvfence only: measure the isolation overhead and the bandwidth ceiling */
  extras: boolean;
  /** kvfence only: quantized products on Q8 activations (NativeBackendOptions.q8Activations) */
  q8Activations: boolean;
}

/** Per-repetition samples; run.ts takes medians across every worker's samples. */
export interface EngineSamples {
  prefillTokensPerSecond: number[];
  decodeTokensPerSecond: number[];
  /** keyed by stream count */
  aggregateTokensPerSecond: Record<string, number[]>;
  info: Record<string, string | number>;
}

export interface KvfenceExtras {
  /** seconds per request lifecycle (prefill, decode, release), paired: checked pool vs unchecked */
  checkedSeconds: number[];
  uncheckedSeconds: number[];
  /** seconds per lifecycle of the pool calls alone (no model), checked and unchecked */
  poolOpsCheckedSeconds: number[];
  poolOpsUncheckedSeconds: number[];
}

export interface KvfenceSamples extends EngineSamples {
  /** STREAM triad GB/s measured beside each single-stream decode (the median of passes right before and after it),
   * index for index with decodeTokensPerSecond */
  triadBesideDecode: number[];
  /** weight bytes one decode step reads */
  weightBytesPerToken: number;
  extras?: KvfenceExtras;
}

export const RESULT_MARKER = 'KVFENCE_BENCH_RESULT ';

/** Deterministic prompt ids, the same for both engines (the vocabulary's first 256 ids are left out: bytes/specials). */
export function benchPrompt(vocabSize: number, length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => 256 + ((i * 7919 + salt * 104_729) % (vocabSize - 256)));
}

/** A greedy engine request of a bench prompt (benchPrompt), its tenant's page quota out of the way. */
export function benchRequest(
  vocabSize: number,
  id: string,
  tenant: string,
  prompt: number,
  tokens: number,
  salt: number,
): GenerationRequest {
  const promptTokens = benchPrompt(vocabSize, prompt, salt);
  return { id, tenant, promptTokens, maxTokens: tokens, sampling: GREEDY, topLogprobs: 0, tenantKvPagesMax: 1 << 24 };
}

/** The number after `--name` on the command line, or `fallback`. */
export function numberFlag(argv: readonly string[], name: string, fallback: number): number {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
}
