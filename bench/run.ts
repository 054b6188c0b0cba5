/**
 * `npm run bench`: kvfence (native backend) against llama.cpp (node-llama-cpp, CPU) on the same generated GGUF files
 * (cached in .cache/bench/) with the same thread count, side by side in one run. Each engine runs in its own child
 * process, alternating which goes first round by round; every figure is the median of all repetitions. Prints a table
 * of ratios and writes everything, samples included, to .cache/bench/latest.json.
 *
 *   npm run bench -- [--quick] [--models 135m-f16,15m-q8_0] [--threads 2] [--rounds 2] [--repetitions 3]
 *                    [--prompt 256] [--decode 64] [--chunk 256] [--streams 1,4,16] [--no-llama] [--q8-activations]
 *                    [--llama-bench /path/to/llama-bench]   (or KVFENCE_LLAMA_BENCH: llama.cpp's own benchmark as a
 *                                                            second baseline, run on the same files, one turn a round)
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ensureGeneratedModel } from '../src/model/default-model.js';
import { readGgufHeader } from '../src/model/gguf-read.js';
import { modelConfigFromGguf } from '../src/model/model-config.js';
import { parseModel, positive, runWorker } from './bench-cli.js';
import type { BenchJob, EngineSamples, KvfenceSamples } from './bench-types.js';
import { type LlamaBenchSamples, type ModelResult, renderTable } from './report.js';

const CACHE = join('.cache', 'bench');
const ALL_MODELS = ['15m-f32', '15m-f16', '15m-q8_0', '135m-f32', '135m-f16', '135m-q8_0', '135m-q4_k_m', '135m-q6_k'];

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    models: { type: 'string' },
    threads: { type: 'string', default: String(Math.min(2, availableParallelism())) },
    rounds: { type: 'string' },
    repetitions: { type: 'string' },
    prompt: { type: 'string', default: '256' },
    decode: { type: 'string', default: '64' },
    chunk: { type: 'string' },
    streams: { type: 'string', default: '1,4,16' },
    'no-llama': { type: 'boolean', default: false },
    'q8-activations': { type: 'boolean', default: false },
    'llama-bench': { type: 'string', default: process.env.KVFENCE_LLAMA_BENCH },
  },
});

const quick = values.quick === true;
const models = (values.models ?? (quick ? '135m-f16' : ALL_MODELS.join(','))).split(',').map(parseModel);
const threadCount = positive('threads', values.threads!);
const rounds = positive('rounds', values.rounds ?? (quick ? '1' : '2'));
const repetitions = positive('repetitions', values.repetitions ?? (quick ? '2' : '3'));
const promptTokens = positive('prompt', values.prompt!);
const withLlama = values['no-llama'] !== true;
const llamaBenchPath = values['llama-bench'];
const llamaBench = llamaBenchPath !== undefined && existsSync(llamaBenchPath) ? llamaBenchPath : undefined;
if (llamaBenchPath !== undefined && llamaBench === undefined)
  process.stderr.write(`bench: llama-bench not found at ${llamaBenchPath}; the llama-bench rows are left out\n`);

interface LlamaBenchEntry {
  build_commit: string;
  build_number: number;
  n_prompt: number;
  n_gen: number;
  n_depth: number;
  samples_ts: number[];
}

/**
 * llama.cpp's own benchmark binary on the same file and thread count: prompt processing of the prompt length from an
 * empty context, and generation of the decode length after a context of the prompt length (what kvfence's decode
 * figure measures). Its figures per repetition become samples like the engines'.
 */
function runLlamaBench(binary: string, modelPath: string, job: BenchJob): LlamaBenchSamples {
  const prompt = String(job.promptTokens);
  const threads = String(job.threadCount);
  const gen = String(job.decodeTokens);
  const reps = String(job.repetitions);
  const args = ['-m', modelPath, '-t', threads, '-r', reps, '-p', prompt, '-n', gen, '-d', `0,${prompt}`, '-o', 'json'];
  const result = spawnSync(binary, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: 30 * 60 * 1000 });
  if (result.status !== 0)
    throw new Error(`${binary} failed (exit ${result.status ?? result.signal}): ${result.stderr}`);
  const entries = JSON.parse(result.stdout) as LlamaBenchEntry[];
  const samples = (pp: number, tg: number, depth: number) => {
    const entry = entries.find((e) => e.n_prompt === pp && e.n_gen === tg && e.n_depth === depth);
    if (entry === undefined) throw new Error(`${binary} printed no pp${pp}/tg${tg} at depth ${depth}`);
    return entry.samples_ts;
  };
  const first = entries[0];
  return {
    prefillTokensPerSecond: samples(job.promptTokens, 0, 0),
    decodeTokensPerSecond: samples(0, job.decodeTokens, job.promptTokens),
    build: first === undefined ? 'unknown' : `${first.build_commit} (${first.build_number})`,
  };
}

/** One engine's samples from every round, as one set (the medians are taken over all of them). */
function merge<T extends EngineSamples | KvfenceSamples | LlamaBenchSamples>(runs: T[]): T {
  const first = runs[0]!;
  const merged = structuredClone(first);
  for (const run of runs.slice(1)) {
    merged.prefillTokensPerSecond.push(...run.prefillTokensPerSecond);
    merged.decodeTokensPerSecond.push(...run.decodeTokensPerSecond);
    if ('aggregateTokensPerSecond' in run && 'aggregateTokensPerSecond' in merged)
      for (const [k, v] of Object.entries(run.aggregateTokensPerSecond)) merged.aggregateTokensPerSecond[k]!.push(...v);
    if ('triadBesideDecode' in run && 'triadBesideDecode' in merged)
      merged.triadBesideDecode.push(...run.triadBesideDecode);
  }
  return merged;
}

const results: ModelResult[] = [];
for (const m of models) {
  const modelPath = ensureGeneratedModel({ preset: m.preset, arch: 'llama', dtype: m.dtype, seed: 1 }, CACHE);
  const config = modelConfigFromGguf(readGgufHeader(modelPath).metadata, modelPath);
  const job: BenchJob = {
    modelPath,
    vocabSize: config.vocabSize,
    threadCount,
    repetitions,
    promptTokens,
    decodeTokens: positive('decode', values.decode!),
    prefillChunkTokens: positive('chunk', values.chunk ?? String(promptTokens)),
    streamCounts: values.streams!.split(',').map((s) => positive('streams', s)),
    aggregateSteps: quick ? 16 : 32,
    extras: false,
    q8Activations: values['q8-activations'] === true,
  };
  const kvfenceRuns: KvfenceSamples[] = [];
  const llamaRuns: EngineSamples[] = [];
  const llamaBenchRuns: LlamaBenchSamples[] = [];
  // Every engine runs once a round, in alternating order, so the drift of a shared machine's speed over the minutes
  // of a run falls on all of them alike.
  const engines = ['kvfence', ...(withLlama ? ['llama'] : []), ...(llamaBench !== undefined ? ['llama-bench'] : [])];
  for (let round = 0; round < rounds; round++) {
    for (const engine of round % 2 === 0 ? engines : [...engines].reverse()) {
      process.stderr.write(`bench: ${m.preset} ${m.dtype}: ${engine}, round ${round + 1}/${rounds}\n`);
      if (engine === 'kvfence') {
        kvfenceRuns.push(runWorker<KvfenceSamples>('kvfence-worker.js', { ...job, extras: round === 0 }, process.env));
      } else if (engine === 'llama') {
        llamaRuns.push(runWorker<EngineSamples>('llama-worker.js', job, { ...process.env, UV_THREADPOOL_SIZE: '1' }));
      } else if (llamaBench !== undefined) {
        llamaBenchRuns.push(runLlamaBench(llamaBench, modelPath, job));
      }
    }
  }
  const kvfence = merge(kvfenceRuns);
  const extras = kvfenceRuns[0]!.extras;
  if (extras !== undefined) kvfence.extras = extras;
  results.push({
    model: `${m.preset} ${m.dtype}`,
    kvfence,
    llama: withLlama ? merge(llamaRuns) : undefined,
    llamaBench: llamaBenchRuns.length > 0 ? merge(llamaBenchRuns) : undefined,
  });
}

const report = {
  date: new Date().toISOString(),
  command: `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim(),
  machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: availableParallelism(), loadAverageAtEnd: loadavg() },
  threadCount,
  promptTokens,
  results,
};
const table = renderTable(results, threadCount);
if (values['q8-activations'] === true)
  process.stdout.write('kvfence: quantized products on Q8 activations (--q8-activations; docs/native.md)\n');
process.stdout.write(`${table}\n`);
mkdirSync(CACHE, { recursive: true });
writeFileSync(join(CACHE, 'latest.json'), `${JSON.stringify({ ...report, table: table.split('\n') }, null, 2)}\n`);
process.stdout.write(`(all samples: ${join(CACHE, 'latest.json')})\n`);
