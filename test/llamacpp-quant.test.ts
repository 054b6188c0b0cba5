/**
 * kvfence against llama.cpp (node-llama-cpp 3.21.1, CPU) on every quantized weight type: llama.cpp loads the files
 * kvfence writes, and both read the same bytes.
 *
 * 1. Dequantization through llama.cpp itself: a model whose layers add nothing (attn_output and ffn_down are zero, so
 *    the residual stream is the token's embedding row, which llama.cpp's get_rows dequantizes with ggml's reference
 *    dequantize_row_*) and whose f32 output matrix picks one hidden value per token (row v is the unit vector
 *    v mod dim). Its logits are the RMS-normalized dequantized embedding rows (times 3): the only difference left is
 *    f32 rounding in the norm (~1e-5 in log p). A wrong quant, scale or min moves a value by at least one step (1% to
 *    30% of the row's spread), hundreds of times the tolerance. 64 of the 512 rows per type, in one prefill. (Bit
 *    equality with ggml's dequantizers is src/model/quant.test.ts.)
 * 2. Whole models in each type (every matrix that type, on the `small` shape whose rows are whole 256-value
 *    super-blocks) and two llama-quantize mixes, at logit scale LOGIT_SCALE: log-probabilities at every position and
 *    token within a tolerance per type, and llama.cpp's greedy tokens (near-ties aside, see the test), on the
 *    reference backend and the native one (whose instruction sets give the same bits: src/compute/native-quant.test.ts).
 *    llama.cpp rounds the activations to 8 bits (Q8_0 for Q4_0/Q5_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants) for
 *    its integer dot products and keeps KV in f16; kvfence multiplies the exactly dequantized weights with f32
 *    activations. The tolerances are 2-3x the largest difference measured (listed per case); a wrong sub-block scale
 *    moves log-probabilities by whole units.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { Backend } from '../src/compute/backend.js';
import { ReferenceBackend } from '../src/compute/reference-backend.js';
import type { QuantizedDType } from '../src/model/gguf-types.js';
import { writeGguf } from '../src/model/gguf-write.js';
import { type LoadedModel, loadModel } from '../src/model/load-model.js';
import { encodeWeights } from '../src/model/quant.js';
import { makeTestModel, type TestModelOptions } from '../src/model/test-model.js';
import { SeededRandom } from '../src/util/random.js';
import { prefillLogits } from './helpers/forward-checks.js';
import {
  largestLogprobGap,
  llamaCpp,
  llamaCppGreedy,
  llamaCppLogprobs,
  loadLlamaCppModel,
} from './helpers/llamacpp.js';
import { forwardFor, loadTestModel, testModelFile } from './helpers/models.js';
import { nativeBackendForTest } from './helpers/native.js';
import { tempDirectory } from './helpers/temp.js';

const dir = tempDirectory('kvfence-quant-');
const native = nativeBackendForTest();

after(async () => {
  native.close();
  await (await llamaCpp()).dispose();
});

const PROMPT =
  'The quick brown fox jumps over the lazy dog. In 2026, 155 responses leaked: never again! Café naïve 日本 — ok?\n  code(x) = x + 1;';

/** The largest |log p_kvfence − log p_llama.cpp| over every position and vocabulary token, per backend. */
async function worstLogprobGap(
  model: LoadedModel,
  path: string,
  ids: number[],
  backends: Backend[],
): Promise<number[]> {
  const reference = await loadLlamaCppModel(path);
  try {
    const theirs = await llamaCppLogprobs(reference, ids);
    const vocab = model.config.vocabSize;
    return backends.map((backend) => {
      const logits = prefillLogits(forwardFor(model, Math.ceil(ids.length / 16), 16, backend), ids, ids.length);
      return largestLogprobGap(logits, theirs, vocab);
    });
  } finally {
    await reference.dispose();
  }
}

const BACKENDS: [string, Backend][] = [
  ['reference', new ReferenceBackend()],
  ['native', native],
];

/** The `small` model with `dtype` token embeddings, zero attn_output/ffn_down and a unit-vector f32 output matrix. */
function embeddingProbe(dtype: QuantizedDType): string {
  const made = makeTestModel({ preset: 'small', arch: 'llama', dtype: 'f32', seed: 31 });
  const random = new SeededRandom(32);
  const tensors = made.tensors.map((t) => {
    const [inDim, outDim] = t.dims as [number, number];
    const count = t.dims.length === 2 ? inDim * outDim : 0;
    if (t.name === 'token_embd.weight') {
      const values = Float32Array.from({ length: count }, () => random.normal() * (random.next() < 0.05 ? 6 : 1));
      return { ...t, dtype, data: encodeWeights(values, dtype) };
    }
    if (/attn_output|ffn_down/.test(t.name)) return { ...t, data: new Float32Array(count) };
    if (t.name === 'output.weight') {
      const unit = new Float32Array(count);
      for (let v = 0; v < outDim; v++) unit[v * inDim + (v % inDim)] = 1;
      return { ...t, data: unit };
    }
    if (t.name === 'output_norm.weight') return { ...t, data: new Float32Array(inDim).fill(3) };
    return t;
  });
  const path = join(dir, `probe-${dtype}.gguf`);
  writeGguf(path, made.metadata, tensors);
  return path;
}

const QUANTIZED: QuantizedDType[] = ['q4_0', 'q4_1', 'q5_0', 'q5_1', 'q8_0', 'q2_k', 'q3_k', 'q4_k', 'q5_k', 'q6_k'];

describe('dequantization through llama.cpp: 64 embedding rows of every type', () => {
  for (const dtype of QUANTIZED) {
    test(`${dtype}: logits are the same normalized rows (|Δ log p| <= 1e-4)`, async (t) => {
      const path = embeddingProbe(dtype);
      const model = loadModel(path);
      // 64 rows of the vocabulary, scattered over it
      const ids = Array.from({ length: 64 }, (_, i) => (i * 197) % model.config.vocabSize);
      const gaps = await worstLogprobGap(
        model,
        path,
        ids,
        BACKENDS.map(([, b]) => b),
      );
      t.diagnostic(`largest |Δ log p|: reference ${gaps[0]!.toExponential(2)}, native ${gaps[1]!.toExponential(2)}`);
      for (const gap of gaps) assert.ok(gap <= 1e-4, `largest logprob difference ${gap}`);
    });
  }
});

interface Case {
  options: TestModelOptions;
  /**
   * largest allowed |Δ log p| over every position and token, at logit scale LOGIT_SCALE (measured largest in the
   * comment): about 4x the scale-1 differences, and larger for the K-quants, whose activations llama.cpp rounds with
   * one scale per 256 values (Q8_K) rather than per 32
   */
  tolerance: number;
}

const CASES: Case[] = [
  { options: { preset: 'small', arch: 'llama', dtype: 'q4_0', seed: 201 }, tolerance: 0.5 }, // measured 0.15
  { options: { preset: 'small', arch: 'llama', dtype: 'q4_1', seed: 202 }, tolerance: 0.5 }, // measured 0.18
  { options: { preset: 'small', arch: 'llama', dtype: 'q5_0', seed: 203 }, tolerance: 0.5 }, // measured 0.16
  { options: { preset: 'small', arch: 'llama', dtype: 'q5_1', seed: 204 }, tolerance: 0.5 }, // measured 0.16
  { options: { preset: 'small', arch: 'llama', dtype: 'q2_k', seed: 205 }, tolerance: 0.8 }, // measured 0.35
  { options: { preset: 'small', arch: 'llama', dtype: 'q3_k', seed: 206 }, tolerance: 0.8 }, // measured 0.23
  { options: { preset: 'small', arch: 'llama', dtype: 'q4_k', seed: 207 }, tolerance: 0.8 }, // measured 0.34
  { options: { preset: 'small', arch: 'llama', dtype: 'q5_k', seed: 208 }, tolerance: 0.8 }, // measured 0.24
  { options: { preset: 'small', arch: 'llama', dtype: 'q6_k', seed: 219 }, tolerance: 0.8 }, // measured 0.23
  // llama-quantize mixes (Q4_K with Q6_K; Q3_K with Q4_K, Q5_K and Q6_K)
  { options: { preset: 'small', arch: 'llama', dtype: 'q4_k_m', seed: 210 }, tolerance: 0.8 }, // measured 0.24
  { options: { preset: 'small', arch: 'qwen2', dtype: 'q3_k_m', seed: 211 }, tolerance: 0.8 }, // measured 0.23
];

/** Logit spread of the whole-model cases: sharp enough that the greedy token usually leads by whole units. */
const LOGIT_SCALE = 4;

for (const c of CASES) {
  const options = { ...c.options, logitScale: LOGIT_SCALE };
  test(`${c.options.preset} ${c.options.arch} ${c.options.dtype}: log-probabilities within ${c.tolerance} at every position, llama.cpp's greedy tokens`, async (t) => {
    const model = loadTestModel(options);
    const reference = await loadLlamaCppModel(testModelFile(options));
    try {
      const prompt = model.tokenizer.encode(PROMPT, { addSpecial: false });
      const count = 16;
      const continuation = await llamaCppGreedy(reference, prompt, count);
      assert.equal(continuation.length, count, 'llama.cpp generated the whole continuation (no end-of-text token)');
      const ids = [...prompt, ...continuation];
      const theirs = await llamaCppLogprobs(reference, ids);
      const vocab = model.config.vocabSize;
      const gaps: number[] = [];
      for (const [name, backend] of BACKENDS) {
        const logits = prefillLogits(forwardFor(model, Math.ceil(ids.length / 16), 16, backend), ids, ids.length);
        const worst = largestLogprobGap(logits, theirs, vocab);
        gaps.push(worst);
        assert.ok(worst <= c.tolerance, `${name}: largest logprob difference ${worst} exceeds ${c.tolerance}`);
        // Greedy, by teacher forcing: at each step of llama.cpp's continuation its token must be kvfence's argmax,
        // or — where llama.cpp's 8-bit activations can legitimately swap the top two — within the tolerance of it.
        let ties = 0;
        for (let i = 0; i < count; i++) {
          const row = logits.subarray((prompt.length - 1 + i) * vocab, (prompt.length + i) * vocab);
          let top = 0;
          for (let v = 1; v < vocab; v++) if (row[v]! > row[top]!) top = v;
          if (top === continuation[i]) continue;
          ties++;
          const margin = row[top]! - row[continuation[i]!]!;
          assert.ok(
            margin <= c.tolerance,
            `${name} step ${i}: llama.cpp's ${continuation[i]} is ${margin} below ${top}`,
          );
        }
        assert.ok(ties <= 2, `${name}: ${ties} of ${count} greedy steps differ`);
        if (name === 'native')
          t.diagnostic(`greedy: ${count - ties} of ${count} steps the same token, ${ties} near-ties`);
      }
      t.diagnostic(
        `${ids.length} positions: largest |Δ log p| reference ${gaps[0]!.toExponential(2)}, native ${gaps[1]!.toExponential(2)}`,
      );
    } finally {
      await reference.dispose();
    }
  });
}
