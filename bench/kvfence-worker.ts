/**
 * Benchmark worker for kvfence (one child process per run, so neither engine shares a process with the other): the
 * native backend through the real ForwardPass and PagePool. Prints one KVFENCE_BENCH_RESULT line of JSON.
 */
import { ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import { argmax } from '../src/engine/sampler.js';
import { makeKvLayout, pagesForTokens } from '../src/kv/kv-layout.js';
import { newPageTable, type PageTable } from '../src/kv/page-table.js';
import { loadModel } from '../src/model/load-model.js';
import { median } from '../src/util/median.js';
import { type BenchJob, benchPrompt, type KvfenceExtras, type KvfenceSamples, RESULT_MARKER } from './bench-types.js';
import { layerMatrices, matrixBytes } from './decode-weights.js';
import { benchPool } from './unchecked-pool.js';

const PAGE_SIZE = 16;
const job = JSON.parse(process.argv[2] ?? '{}') as BenchJob;
// Q8 activations read Q5_0 as stored, as the CLI's --q8-activations does (flags.ts widensQ5_0)
const model = loadModel(job.modelPath, { widenQ5_0: !job.q8Activations });
const backend = new NativeBackend({ threadCount: job.threadCount, q8Activations: job.q8Activations });
const c = model.config;
const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, PAGE_SIZE);
const seconds = (from: number) => (performance.now() - from) / 1000;

function runOne(forward: ForwardPass, table: PageTable, tokens: number[], logits: 'last' | 'none'): Float32Array {
  const [out] = forward.run([{ table, tokens, logits }]);
  if (out === undefined || !out.ok)
    throw new Error(`forward failed: ${out?.ok === false ? out.error.message : 'no output'}`);
  return out.logits;
}

/** One request's life: prefill (chunked), greedy decode, release. Returns the two phase times. */
function lifecycle(forward: ForwardPass, request: string, promptTokens: number, decodeTokens: number) {
  const table = newPageTable({ tenant: 'bench', request });
  if (!forward.pool.grow(table, pagesForTokens(layout, promptTokens + decodeTokens))) throw new Error('pool too small');
  const prompt = benchPrompt(c.vocabSize, promptTokens, 1);
  const started = performance.now();
  let logits: Float32Array = new Float32Array(0);
  for (let at = 0; at < prompt.length; at += job.prefillChunkTokens) {
    const last = at + job.prefillChunkTokens >= prompt.length;
    logits = runOne(forward, table, prompt.slice(at, at + job.prefillChunkTokens), last ? 'last' : 'none');
  }
  const prefillSeconds = seconds(started);
  const decodeStarted = performance.now();
  for (let i = 0; i < decodeTokens; i++) logits = runOne(forward, table, [argmax(logits)], 'last');
  const decodeSeconds = seconds(decodeStarted);
  forward.pool.releaseAll(table);
  return { prefillSeconds, decodeSeconds, totalSeconds: seconds(started) };
}

function forwardWith(pageCount: number, unchecked = false): ForwardPass {
  return new ForwardPass(model, backend, benchPool(layout, pageCount, unchecked));
}

/** N sequences with a short prompt each, then `steps` decode steps of all N in one forward call each. */
function aggregate(streams: number): number {
  const promptTokens = 16;
  const forward = forwardWith(streams * pagesForTokens(layout, promptTokens + job.aggregateSteps + 1));
  const tables = Array.from({ length: streams }, (_, i) => newPageTable({ tenant: 'bench', request: `agg-${i}` }));
  let next = tables.map((table, i) => {
    forward.pool.grow(table, pagesForTokens(layout, promptTokens + job.aggregateSteps + 1));
    return argmax(runOne(forward, table, benchPrompt(c.vocabSize, promptTokens, i + 2), 'last'));
  });
  const started = performance.now();
  for (let step = 0; step < job.aggregateSteps; step++) {
    const outs = forward.run(tables.map((table, i) => ({ table, tokens: [next[i]!], logits: 'last' as const })));
    next = outs.map((o) => {
      if (!o.ok) throw o.error;
      return argmax(o.logits);
    });
  }
  const elapsed = seconds(started);
  for (const table of tables) forward.pool.releaseAll(table);
  return (streams * job.aggregateSteps) / elapsed;
}

/** STREAM's triad over three 64 MiB arrays (far beyond the caches), GB/s counted as STREAM does: 3 arrays × 4 bytes. */
const triadArrays = (() => {
  const n = 1 << 24;
  return { a: new Float32Array(n), b: new Float32Array(n).fill(1), d: new Float32Array(n).fill(2) };
})();
function triadPasses(passes: number): number[] {
  const { a, b, d } = triadArrays;
  return Array.from({ length: passes }, () => {
    const started = performance.now();
    backend.triad(a, b, d, 3);
    return (3 * 4 * a.length) / seconds(started) / 1e9;
  });
}

/**
 * The isolation work of one lifecycle on its own: the pool calls ForwardPass makes (grow; per forward call
 * checkReadable + markWritten; release with scrubbing), without the model. Checked minus unchecked is what isolation
 * costs a request, measured without the run-to-run noise of whole forward passes.
 */
function poolOpsSeconds(unchecked: boolean, promptTokens: number, decodeTokens: number, chunk: number): number {
  const pool = benchPool(layout, pagesForTokens(layout, promptTokens + decodeTokens), unchecked);
  const runs = 50;
  const started = performance.now();
  for (let run = 0; run < runs; run++) {
    const table = newPageTable({ tenant: 'bench', request: `ops-${run}` });
    pool.grow(table, pagesForTokens(layout, promptTokens + decodeTokens));
    const step = (n: number) => {
      pool.checkReadable(table, table.writtenTokens);
      pool.markWritten(table, table.writtenTokens + n);
    };
    for (let at = 0; at < promptTokens; at += chunk) step(Math.min(chunk, promptTokens - at));
    for (let i = 0; i < decodeTokens; i++) step(1);
    pool.releaseAll(table);
  }
  return seconds(started) / runs;
}

function extras(): KvfenceExtras {
  const pages = pagesForTokens(layout, job.promptTokens + job.decodeTokens);
  const checked = forwardWith(pages);
  const unchecked = forwardWith(pages, true);
  const checkedSeconds: number[] = [];
  const uncheckedSeconds: number[] = [];
  const promptTokens = Math.min(job.promptTokens, 64);
  const decodeTokens = Math.min(job.decodeTokens, 32);
  for (let i = 0; i < 4 * job.repetitions; i++) {
    // alternate which goes first, so drift in machine load falls on both sides
    const order = i % 2 === 0 ? [checked, unchecked] : [unchecked, checked];
    for (const forward of order) {
      const t = lifecycle(forward, `iso-${i}`, promptTokens, decodeTokens).totalSeconds;
      (forward === checked ? checkedSeconds : uncheckedSeconds).push(t);
    }
  }
  const chunk = Math.min(job.prefillChunkTokens, promptTokens);
  const poolOps = Array.from({ length: 5 }, () => ({
    checked: poolOpsSeconds(false, promptTokens, decodeTokens, chunk),
    unchecked: poolOpsSeconds(true, promptTokens, decodeTokens, chunk),
  }));
  return {
    checkedSeconds,
    uncheckedSeconds,
    poolOpsCheckedSeconds: poolOps.map((p) => p.checked),
    poolOpsUncheckedSeconds: poolOps.map((p) => p.unchecked),
  };
}

const forward = forwardWith(pagesForTokens(layout, job.promptTokens + job.decodeTokens));
lifecycle(forward, 'warm-up', Math.min(32, job.promptTokens), 4);
triadPasses(1); // the arrays' first touch: page faults, not bandwidth
const samples: KvfenceSamples = {
  prefillTokensPerSecond: [],
  decodeTokensPerSecond: [],
  aggregateTokensPerSecond: {},
  info: {},
  triadBesideDecode: [],
  weightBytesPerToken: matrixBytes([...layerMatrices(model), model.weights.output]),
};
for (let rep = 0; rep < job.repetitions; rep++) {
  // the ceiling measured right before and right after this decode: on a shared machine the triad swings 2× within a
  // run, so each decode is read against the bandwidth of its own minute
  const before = triadPasses(3);
  // the triad leaves no weight in the caches; llama-bench times its prompts back to back, after a warm-up, so a model
  // that fits the caches is timed from them: one untimed prefill of the same length puts kvfence on the same footing
  lifecycle(forward, `warm-${rep}`, job.promptTokens, 0);
  const t = lifecycle(forward, `single-${rep}`, job.promptTokens, job.decodeTokens);
  samples.triadBesideDecode.push(median([...before, ...triadPasses(3)]));
  samples.prefillTokensPerSecond.push(job.promptTokens / t.prefillSeconds);
  samples.decodeTokensPerSecond.push(job.decodeTokens / t.decodeSeconds);
}
for (const streams of job.streamCounts) {
  samples.aggregateTokensPerSecond[streams] = Array.from({ length: job.repetitions }, () => aggregate(streams));
}
if (job.extras) samples.extras = extras();
samples.info = { isa: backend.isa, threads: backend.threadCount, nativeMatmulCalls: backend.callCounts.matmul };
backend.close();
process.stdout.write(`${RESULT_MARKER}${JSON.stringify(samples)}\n`);
