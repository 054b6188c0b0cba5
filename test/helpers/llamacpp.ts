/**
 * llama.cpp, through node-llama-cpp (CPU only, never downloads or builds), as an independent implementation to compare
 * against: prompt token ids and next-token log-probabilities at every position.
 */
import assert from 'node:assert/strict';
import { getLlama, type Llama, LlamaLogLevel, type LlamaModel, type Token } from 'node-llama-cpp';
import { logSoftmax } from '../../src/engine/sampler.js';

let llamaPromise: Promise<Llama> | undefined;

export function llamaCpp(): Promise<Llama> {
  llamaPromise ??= getLlama({
    gpu: false,
    build: 'never',
    skipDownload: true,
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
  });
  return llamaPromise;
}

export async function loadLlamaCppModel(path: string): Promise<LlamaModel> {
  return (await llamaCpp()).loadModel({ modelPath: path });
}

/**
 * log p(next token | tokens[0..i]) for every position i and every token (indexed by token id; NaN where llama.cpp gave
 * none), as llama.cpp computes them (temperature 1, no truncation: the plain softmax of the logits). Arrays, not maps:
 * a 262,144-token vocabulary at 39 positions took 13 s as maps.
 */
export async function llamaCppLogprobs(
  model: LlamaModel,
  tokens: readonly number[],
  contextSize = Math.max(256, tokens.length + 16),
): Promise<Float64Array[]> {
  const context = await model.createContext({
    contextSize,
    batchSize: 512,
    threads: 2,
  });
  try {
    const sequence = context.getSequence();
    const options = { temperature: 1, topK: 0, topP: 1, minP: 0 };
    const outputs = await sequence.controlledEvaluate(
      asTokens(tokens).map((t) => [t, { generateNext: { probabilities: true, options } }]),
    );
    return outputs.map((o, i) => {
      const probabilities = o?.next.probabilities;
      if (probabilities === undefined) throw new Error(`llama.cpp returned no probabilities at position ${i}`);
      const logprobs = new Float64Array(probabilities.size).fill(Number.NaN);
      for (const [token, p] of probabilities) logprobs[token] = Math.log(p);
      return logprobs;
    });
  } finally {
    await context.dispose();
  }
}

/**
 * llama.cpp's greedy continuation of `prompt`, `count` tokens long. `contextSize` matters to phi3, whose RoPE factors
 * llama.cpp picks by it (long ones above the original context).
 */
export async function llamaCppGreedy(
  model: LlamaModel,
  prompt: readonly number[],
  count: number,
  contextSize = Math.max(256, prompt.length + count + 16),
): Promise<number[]> {
  const context = await model.createContext({ contextSize, threads: 2 });
  try {
    const sequence = context.getSequence();
    const out: number[] = [];
    for await (const token of sequence.evaluate(asTokens(prompt), { temperature: 0 })) {
      out.push(token);
      if (out.length === count) break;
    }
    return out;
  } finally {
    await context.dispose();
  }
}

/** node-llama-cpp brands token ids; ours are plain numbers from the same vocabulary. */
function asTokens(ids: readonly number[]): Token[] {
  return ids as Token[];
}

/**
 * The largest |log p| difference between our logits (position-major, `vocab` a position) and llama.cpp's log
 * probabilities, over every position and every token; llama.cpp must have given every token's probability.
 */
export function largestLogprobGap(logits: Float32Array, theirs: readonly Float64Array[], vocab: number): number {
  let worst = 0;
  theirs.forEach((position, i) => {
    const ours = logSoftmax(logits.subarray(i * vocab, (i + 1) * vocab));
    assert.equal(position.length, vocab, `llama.cpp gave every token's probability at position ${i}`);
    for (let token = 0; token < vocab; token++) {
      const gap = Math.abs(ours[token]! - position[token]!);
      // the message is built only on failure: this loop runs once per token and position (10 million for gemma3)
      if (Number.isNaN(gap)) assert.fail(`llama.cpp gave no probability for token ${token} at position ${i}`);
      worst = Math.max(worst, gap);
    }
  });
  return worst;
}
