/**
 * Each architecture kvfence reads, against llama.cpp (node-llama-cpp 3.21.1, CPU), on a generated model of that family
 * with the family's real vocabulary (test/helpers/real-vocab.ts): the same token ids over the hard-text corpus (with
 * and without special-token parsing), the same prompt ids, log-probabilities of every vocabulary token at every
 * position within a tolerance, and the same greedy continuation on a sharp-logit model.
 *
 * The families exercise what differs from Llama 2: Llama 3's rope_freqs factors, a head size other than dim/heads and
 * tied output; qwen3's per-head Q/K RMSNorm; gemma3's √dim embedding scale, sandwich norms, GELU gate, Q/K norms and
 * sliding-window layers (window 8, so a 40-token prompt depends on it) with their own RoPE base; phi3's fused QKV and
 * gate/up, partial rotary dims (12 of 16) and long RoPE factors with an attention factor (and, within its original
 * context, the short factors); gemma3's 27B type (62 layers), which scales q·k by 1/√(dim/heads); linear RoPE scaling
 * (rope.scaling.type linear, as long-context fine-tunes write it). A wrong 27B scale moves log p by 2.9.
 *
 * Tolerances: the models are f32, so what differs is llama.cpp's f32 arithmetic (f32 sums, f16 in its attention)
 * against kvfence's f64 sums: about 1e-3 on untied models of these shapes (test/llamacpp.test.ts). The output is tied
 * here (a 128k-262k vocabulary would double the file otherwise), and a tied test model's small embedding and large
 * output norm (test-model.ts) amplify the same rounding: the same qwen3 model measured 1.3e-3 untied, 9e-3 tied.
 * gemma3 adds llama.cpp's f16 GELU table (input and result rounded to f16). The tolerances leave 2-3x room over the
 * measured values in each diagnostic; a wrong norm, scale, window or rotation moves them by tenths to units.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { generate } from '../src/engine/generate.js';
import { GREEDY } from '../src/engine/sampler.js';
import type { TestModelOptions } from '../src/model/test-model.js';
import { HARD_TEXT } from './fixtures/hard-text.js';
import { prefillLogits } from './helpers/forward-checks.js';
import {
  largestLogprobGap,
  llamaCpp,
  llamaCppGreedy,
  llamaCppLogprobs,
  loadLlamaCppModel,
} from './helpers/llamacpp.js';
import { forwardFor, loadTestModel, testModelFile } from './helpers/models.js';
import { phi3Vocabulary, REAL_VOCABULARIES } from './helpers/real-vocab.js';

const PROMPT =
  'The quick brown fox jumps over the lazy dog. In 2026, 155 responses leaked: never again! Café 日本 — ok?\n  x = 1;';

interface Case {
  label: string;
  options: TestModelOptions;
  logprobTolerance: number;
  /** llama.cpp's context size (phi3 picks its RoPE factors by it) */
  contextSize?: number;
}

const CASES: Case[] = [
  {
    label: 'llama 3 (Llama 3 vocabulary, rope_freqs, head size 32 with dim 64 and 4 heads, tied output)',
    options: {
      preset: 'tiny',
      arch: 'llama',
      dtype: 'f32',
      seed: 201,
      llama3Rope: true,
      headDim: 32,
      tied: true,
      hfTokenizer: REAL_VOCABULARIES.llama3,
    },
    logprobTolerance: 3e-2,
  },
  {
    label: 'qwen3 (Qwen 3 vocabulary, per-head Q/K RMSNorm)',
    options: {
      preset: 'tiny',
      arch: 'qwen3',
      dtype: 'f32',
      seed: 202,
      tied: true,
      hfTokenizer: REAL_VOCABULARIES.qwen3,
    },
    logprobTolerance: 3e-2,
  },
  {
    label: 'gemma3 (Gemma 3 vocabulary, sliding window 8 every other layer, GELU, sandwich norms)',
    options: {
      preset: 'tiny',
      arch: 'gemma3',
      dtype: 'f32',
      seed: 203,
      tied: true,
      hfTokenizer: REAL_VOCABULARIES.gemma3,
    },
    logprobTolerance: 2e-2,
  },
  {
    label: 'phi3 (Llama 2 / Phi-3 vocabulary, fused QKV and gate/up, 12 of 16 dims rotated, long RoPE factors)',
    options: {
      preset: 'tiny',
      arch: 'phi3',
      dtype: 'f32',
      seed: 204,
      ropeDim: 12,
      contextLength: 1024,
      tied: true,
      hfTokenizer: phi3Vocabulary(),
    },
    logprobTolerance: 3e-2,
    contextSize: 1024,
  },
  {
    // llama.cpp picks the factors by its runtime context, rounded up to 256 tokens; kvfence by the model's context
    label: 'phi3 within its original context (short RoPE factors)',
    options: {
      preset: 'tiny',
      arch: 'phi3',
      dtype: 'f32',
      seed: 205,
      ropeDim: 12,
      contextLength: 256,
      ropeOriginalContext: 256,
      tied: true,
      hfTokenizer: phi3Vocabulary(),
    },
    logprobTolerance: 3e-2,
    contextSize: 256,
  },
  {
    label: "gemma3 with 62 layers, llama.cpp's 27B type (q·k scaled by 1/√(dim/heads) = 1/4, not 1/√(head size 32))",
    options: { preset: 'tiny', arch: 'gemma3', dtype: 'f32', seed: 207, layerCount: 62, headDim: 32, tied: true },
    logprobTolerance: 3e-2,
  },
  {
    label: 'llama with linear RoPE scaling (factor 4)',
    options: { preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 206, ropeLinearFactor: 4, tied: true },
    logprobTolerance: 3e-2,
  },
];

after(async () => {
  await (await llamaCpp()).dispose();
});

for (const c of CASES) {
  describe(c.label, () => {
    test('the same token ids as llama.cpp over the hard-text corpus, and logprobs at every position', async (t) => {
      const model = loadTestModel(c.options);
      const reference = await loadLlamaCppModel(testModelFile(c.options));
      try {
        let compared = 0;
        for (const text of [...HARD_TEXT, HARD_TEXT.join('\n')]) {
          for (const parseSpecial of [false, true]) {
            const ours = model.tokenizer.encode(text, { addSpecial: false, parseSpecial });
            assert.deepEqual(ours, reference.tokenize(text, parseSpecial), `${JSON.stringify(text)} (${parseSpecial})`);
            compared += ours.length;
          }
        }
        t.diagnostic(`${compared} token ids equal over ${HARD_TEXT.length + 1} texts × 2`);

        const ids = model.tokenizer.encode(PROMPT, { addSpecial: false });
        assert.deepEqual(ids, reference.tokenize(PROMPT, false), 'prompt token ids');
        const logits = prefillLogits(forwardFor(model, Math.ceil(ids.length / 16)), ids, ids.length);
        const theirs = await llamaCppLogprobs(reference, ids, c.contextSize);
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

    // untied: a tied test model's large output norm (logitScale / (√dim · 0.02)) turns the rounding differences above
    // into near-ties between sharp logits; the tied output is checked by the log-probabilities above
    test('the same greedy sequence on a sharp-logit model (untied output)', async () => {
      const options = { ...c.options, logitScale: 12, tied: false };
      const model = loadTestModel(options);
      const reference = await loadLlamaCppModel(testModelFile(options));
      try {
        const prompt = model.tokenizer.encode(PROMPT, { addSpecial: false });
        const count = 16;
        const forward = forwardFor(model, Math.ceil((prompt.length + count) / 16));
        const ours = generate(forward, prompt, {
          maxTokens: count,
          sampling: GREEDY,
          prefillChunkTokens: 16,
          isStopToken: () => false,
        });
        const theirs = await llamaCppGreedy(reference, prompt, count, c.contextSize);
        // llama.cpp stops at an end-of-generation token; kvfence's generate here does not
        assert.deepEqual(ours.tokens.slice(0, theirs.length), theirs);
        if (theirs.length < count) assert.ok(model.tokenizer.isEndOfGeneration(ours.tokens[theirs.length]!));
      } finally {
        await reference.dispose();
      }
    });
  });
}
