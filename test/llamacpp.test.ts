/**
 * kvfence against llama.cpp (node-llama-cpp 3.21.1, CPU) on generated models: same prompt token ids, next-token
 * log-probabilities at every position within a tolerance, and the same greedy sequence on sharp-logit models.
 *
 * Why the tolerances are right: both keep K and V in f16 (each value rounded to nearest even); kvfence computes in f32
 * with f64 sums, llama.cpp sums in f32 and rounds the activations to the weights' type before each matmul: to f16
 * (11-bit mantissa) for f16 weights, to bf16 (8-bit mantissa) for bf16 and to q8_0 (8 bits per value, one scale per
 * 32) for q8_0. With logits of standard deviation ~1, measured largest differences over every position and token are
 * ~5e-5 (f32 weights: only the order of the sums differs), ~1.5e-3 (f16) and ~4e-2 (bf16, q8_0); the tolerances leave
 * about 10x room for f32 weights (~5e-4 when kvfence kept K and V in f32) and 2-7x for the others.
 * A real bug (wrong RoPE pairing, a missing bias, a wrong GQA head mapping, an off-by-one position) moves them by 0.3
 * to several units, and the greedy comparison on sharp models catches it as a different token.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { generate } from '../src/engine/generate.js';
import { GREEDY } from '../src/engine/sampler.js';
import type { TestModelOptions } from '../src/model/test-model.js';
import { prefillLogits } from './helpers/forward-checks.js';
import {
  largestLogprobGap,
  llamaCpp,
  llamaCppGreedy,
  llamaCppLogprobs,
  loadLlamaCppModel,
} from './helpers/llamacpp.js';
import { forwardFor, loadTestModel, testModelFile } from './helpers/models.js';

const PROMPT =
  'The quick brown fox jumps over the lazy dog. In 2026, 155 responses leaked: never again! Café naïve 日本 — ok?\n  code(x) = x + 1;';

interface Case {
  label: string;
  options: TestModelOptions;
  /** largest allowed |log p_kvfence - log p_llama.cpp| over every position and token */
  logprobTolerance: number;
}

const CASES: Case[] = [
  {
    label: 'llama f32',
    options: { preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 101, kvHeadCount: 4 },
    logprobTolerance: 5e-4,
  },
  {
    label: 'llama f16',
    options: { preset: 'tiny', arch: 'llama', dtype: 'f16', seed: 102, kvHeadCount: 4 },
    logprobTolerance: 1e-2,
  },
  {
    label: 'llama q8_0',
    options: { preset: 'tiny', arch: 'llama', dtype: 'q8_0', seed: 103, kvHeadCount: 4 },
    logprobTolerance: 0.1,
  },
  {
    label: 'llama grouped-query attention (4 heads, 1 KV head)',
    options: { preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 104, kvHeadCount: 1 },
    logprobTolerance: 5e-4,
  },
  {
    label: 'qwen2 with QKV biases',
    options: { preset: 'tiny', arch: 'qwen2', dtype: 'f32', seed: 105 },
    logprobTolerance: 5e-4,
  },
  {
    label: 'llama 15m shape, tied output, bf16',
    options: { preset: '15m', arch: 'llama', dtype: 'bf16', seed: 106 },
    logprobTolerance: 0.1,
  },
];

after(async () => {
  await (await llamaCpp()).dispose();
});

for (const c of CASES) {
  describe(c.label, () => {
    test('same prompt token ids and log-probabilities at every position', async (t) => {
      const model = loadTestModel(c.options);
      const reference = await loadLlamaCppModel(testModelFile(c.options));
      try {
        const ids = model.tokenizer.encode(PROMPT, { addSpecial: false });
        assert.deepEqual(ids, reference.tokenize(PROMPT, false), 'prompt token ids');

        const logits = prefillLogits(forwardFor(model, Math.ceil(ids.length / 16)), ids, ids.length);
        const theirs = await llamaCppLogprobs(reference, ids);
        const vocab = model.config.vocabSize;
        const worst = largestLogprobGap(logits, theirs, vocab);
        t.diagnostic(
          `${ids.length} positions × ${vocab} tokens: largest |Δ log p| = ${worst.toExponential(2)} (tolerance ${c.logprobTolerance})`,
        );
        assert.ok(worst <= c.logprobTolerance, `largest logprob difference ${worst} exceeds ${c.logprobTolerance}`);
      } finally {
        await reference.dispose();
      }
    });

    test('same greedy sequence on a sharp-logit model', async () => {
      const options = { ...c.options, logitScale: 12 };
      const model = loadTestModel(options);
      const reference = await loadLlamaCppModel(testModelFile(options));
      try {
        const prompt = model.tokenizer.encode(PROMPT, { addSpecial: false });
        const count = c.options.preset === 'tiny' ? 24 : 8; // the reference backend is slow on the 15m shape
        const forward = forwardFor(model, Math.ceil((prompt.length + count) / 16));
        const ours = generate(forward, prompt, {
          maxTokens: count,
          sampling: GREEDY,
          prefillChunkTokens: 16,
          isStopToken: () => false,
        });
        assert.deepEqual(ours.tokens, await llamaCppGreedy(reference, prompt, count));
      } finally {
        await reference.dispose();
      }
    });
  });
}
