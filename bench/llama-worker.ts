/**
 * Benchmark worker for llama.cpp through node-llama-cpp (CPU; never downloads or builds: a local build from
 * `npx --no-install node-llama-cpp source download --gpu false` when there is one, else the prebuilt binary). Run
 * with UV_THREADPOOL_SIZE=1 (run.ts sets it). Prints one KVFENCE_BENCH_RESULT line of JSON.
 */
import { getLlama, type LlamaContextSequence, LlamaLogLevel, type Token } from 'node-llama-cpp';
import { type BenchJob, benchPrompt, type EngineSamples, RESULT_MARKER } from './bench-types.js';

const job = JSON.parse(process.argv[2] ?? '{}') as BenchJob;
const seconds = (from: number) => (performance.now() - from) / 1000;
const asTokens = (ids: readonly number[]) => ids as Token[];

const llama = await getLlama({
  gpu: false,
  build: 'never',
  logLevel: LlamaLogLevel.error,
  progressLogs: false,
  maxThreads: job.threadCount,
});
const model = await llama.loadModel({ modelPath: job.modelPath });
const vocab = job.vocabSize;

/** Greedy decode of `count` tokens after the sequence's current state; the first step evaluates `first`. */
async function decode(sequence: LlamaContextSequence, first: number, count: number): Promise<void> {
  let generated = 0;
  for await (const _ of sequence.evaluate(asTokens([first]), { temperature: 0 })) {
    generated++;
    if (generated === count) break;
  }
}

const samples: EngineSamples = {
  prefillTokensPerSecond: [],
  decodeTokensPerSecond: [],
  aggregateTokensPerSecond: {},
  info: {},
};
{
  const context = await model.createContext({
    contextSize: job.promptTokens + job.decodeTokens + 64,
    batchSize: Math.max(512, job.promptTokens),
    threads: job.threadCount,
  });
  const sequence = context.getSequence();
  const prompt = benchPrompt(vocab, job.promptTokens, 1);
  await sequence.evaluateWithoutGeneratingNewTokens(asTokens(prompt.slice(0, 32)));
  await decode(sequence, prompt[0]!, 4);
  for (let rep = 0; rep < job.repetitions; rep++) {
    await sequence.clearHistory();
    const started = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(asTokens(prompt));
    samples.prefillTokensPerSecond.push(job.promptTokens / seconds(started));
    const decodeStarted = performance.now();
    await decode(sequence, prompt[0]!, job.decodeTokens);
    samples.decodeTokensPerSecond.push(job.decodeTokens / seconds(decodeStarted));
  }
  await context.dispose();
}

for (const streams of job.streamCounts) {
  const promptTokens = 16;
  const context = await model.createContext({
    sequences: streams,
    contextSize: Math.max(256, streams * (promptTokens + job.aggregateSteps + 16)),
    threads: job.threadCount,
  });
  const sequences = Array.from({ length: streams }, () => context.getSequence());
  const runs: number[] = [];
  for (let rep = 0; rep < job.repetitions; rep++) {
    await Promise.all(sequences.map((s) => s.clearHistory()));
    await Promise.all(
      sequences.map((s, i) => s.evaluateWithoutGeneratingNewTokens(asTokens(benchPrompt(vocab, promptTokens, i + 2)))),
    );
    const started = performance.now();
    await Promise.all(sequences.map((s, i) => decode(s, benchPrompt(vocab, 1, i + 50)[0]!, job.aggregateSteps)));
    runs.push((streams * job.aggregateSteps) / seconds(started));
  }
  samples.aggregateTokensPerSecond[streams] = runs;
  await context.dispose();
}
samples.info = { buildType: llama.buildType, llamaCpp: llama.llamaCppRelease.release, threads: job.threadCount };
await model.dispose();
await llama.dispose();
process.stdout.write(`${RESULT_MARKER}${JSON.stringify(samples)}\n`);
