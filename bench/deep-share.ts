/**
 * Sharing a step's time by position (scheduler.ts, prefill-pace.ts) against the same engine pricing every prompt token
 * alike (its forward pass hiding attention's keys and time from the pace: one learned price per token, as before
 * 2026-12-07), in the same run. One tenant ("busy") has a prompt `--depth` tokens in (prefilled alone first, then still
 * going); another ("dec") streams all along; a third ("probe") sends a 64-token prompt every `--every` steps. Prints,
 * for each engine, the probes' wait from submission to first token (ms and steps), the stream's step time, the busy
 * prompt's tokens over the measured steps, medians of `--runs`, and the ratios; checks every probe got the same token
 * either way. A 15m-shaped llama model declaring a 131,072 context, native backend, 2 threads, `--prompt-step-ms` 50.
 *
 *   npm run bench:deep -- [--depth 16384] [--probes 20] [--every 8] [--runs 1]
 */
import { join } from 'node:path';
import { type ForwardInput, type ForwardOutput, ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import { Engine } from '../src/engine/engine.js';
import { makeKvLayout, pagesForTokens } from '../src/kv/kv-layout.js';
import { PagePool } from '../src/kv/page-pool.js';
import { ensureGeneratedModel } from '../src/model/default-model.js';
import { loadModel } from '../src/model/load-model.js';
import { KvfenceError } from '../src/util/errors.js';
import { median, quantile } from '../src/util/median.js';
import { benchRequest, numberFlag } from './bench-types.js';

const CONTEXT = 131_072;
const PAGE_SIZE = 16;
const PROBE_PROMPT = 64;
const DEC_PROMPT = 32;
const DEC_TOKENS = 4096;
/** the busy prompt goes on this far past the depth, so it is still prefilling while the probes run */
const BUSY_MORE = 8192;

const arg = (name: string, fallback: number) => numberFlag(process.argv, name, fallback);
const depth = arg('depth', 16_384);
const probeCount = arg('probes', 20);
const every = arg('every', 8);
const runs = arg('runs', 1);

const model = loadModel(
  ensureGeneratedModel(
    { preset: '15m', arch: 'llama', dtype: 'f32', seed: 1, contextLength: CONTEXT },
    join('.cache', 'bench'),
  ),
);
const backend = new NativeBackend({ threadCount: 2 });
const c = model.config;
const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, PAGE_SIZE);

/** The same forward pass with attention unpriced: the pace sees no keys and no attention time apart. */
class UnpricedForward extends ForwardPass {
  override readonly keysOf = () => 0;

  override run(inputs: readonly ForwardInput[]): ForwardOutput[] {
    const outputs = super.run(inputs);
    this.lastAttention = { ms: 0, keys: 0 };
    return outputs;
  }
}

const request = (id: string, tenant: string, prompt: number, tokens: number, salt: number) =>
  benchRequest(c.vocabSize, id, tenant, prompt, tokens, salt);

interface Run {
  probeWaitMs: number[];
  probeWaitSteps: number[];
  stepMs: number[];
  busyTokens: number;
  firstTokens: string;
}

function run(priced: boolean): Run {
  const tokens = depth + BUSY_MORE + DEC_PROMPT + DEC_TOKENS + probeCount * (PROBE_PROMPT + 1);
  const pool = new PagePool(layout, pagesForTokens(layout, tokens) + probeCount + 4);
  const forward = priced ? new ForwardPass(model, backend, pool) : new UnpricedForward(model, backend, pool);
  const engine = new Engine(
    {
      provenContext: Math.min(CONTEXT, tokens),
      vocabSize: c.vocabSize,
      runningMax: 32,
      waitingMax: 256,
      queueTimeoutMs: 3_600_000,
      prefillChunkTokens: 512,
      stepTokenBudget: 2048,
      promptStepMs: 50,
      isStopToken: () => false,
    },
    forward,
  );
  engine.submit(request('busy', 'busy', depth + BUSY_MORE, 1, 1), 0);
  const written = () => engine.runningTable('busy')?.writtenTokens ?? 0;
  for (let step = 0; written() < depth; step++) {
    if (step > depth) throw new Error('the busy prompt did not reach its depth');
    engine.step(0);
  }
  engine.submit(request('dec', 'dec', DEC_PROMPT, DEC_TOKENS, 2), 0);
  const from = written();
  const sent = new Map<string, { step: number; at: number }>();
  const run: Run = { probeWaitMs: [], probeWaitSteps: [], stepMs: [], busyTokens: 0, firstTokens: '' };
  const firsts: number[] = [];
  for (let step = 0, submitted = 0; run.probeWaitMs.length < probeCount; step++) {
    if (step > probeCount * every * 100) throw new Error('the probes did not get their tokens');
    if (step % every === 0 && submitted < probeCount) {
      const probe = request(`probe${submitted}`, 'probe', PROBE_PROMPT, 1, 100 + submitted++);
      engine.submit(probe, 0);
      sent.set(probe.id, { step, at: performance.now() });
    }
    const started = performance.now();
    const events = engine.step(0);
    run.stepMs.push(performance.now() - started);
    for (const e of events) {
      if (e.kind === 'end' && e.end.kind === 'failed') throw e.end.error;
      const probe = e.kind === 'token' ? sent.get(e.request) : undefined;
      if (probe === undefined || e.kind !== 'token') continue;
      run.probeWaitMs.push(performance.now() - probe.at);
      run.probeWaitSteps.push(step - probe.step + 1);
      firsts[Number(e.request.slice('probe'.length))] = e.token.id;
      sent.delete(e.request);
    }
  }
  run.busyTokens = written() - from;
  run.firstTokens = JSON.stringify(firsts);
  engine.abortAll(new KvfenceError('request_cancelled', 'the bench is done'));
  return run;
}

const results = { priced: [] as Run[], tokens: [] as Run[] };
for (let i = 0; i < runs; i++)
  for (const priced of [false, true]) results[priced ? 'priced' : 'tokens'].push(run(priced));
if (new Set([...results.priced, ...results.tokens].map((r) => r.firstTokens)).size !== 1) {
  throw new Error('pricing by position changed a probe’s first token');
}

const summary = (rs: Run[]) => ({
  waitMs: median(rs.map((r) => median(r.probeWaitMs))),
  waitMsP90: median(rs.map((r) => quantile(r.probeWaitMs, 0.9))),
  waitSteps: median(rs.map((r) => median(r.probeWaitSteps))),
  stepMs: median(rs.map((r) => median(r.stepMs))),
  stepMsP99: median(rs.map((r) => quantile(r.stepMs, 0.99))),
  busyTokens: median(rs.map((r) => r.busyTokens)),
  steps: median(rs.map((r) => r.stepMs.length)),
});
const tokens = summary(results.tokens);
const priced = summary(results.priced);
console.log(
  `busy: a prompt ${depth} tokens in (of ${depth + BUSY_MORE}); dec: one stream; probe: ${PROBE_PROMPT} + 1 tokens ` +
    `every ${every} steps, ${probeCount} probes; ${c.name}, native backend, 2 threads, medians of ${runs} runs`,
);
for (const [name, s] of [
  ['priced by token count', tokens],
  ['priced by position', priced],
] as const) {
  console.log(
    `${name.padEnd(22)} probe wait to first token: ${s.waitMs.toFixed(0).padStart(6)} ms (p90 ${s.waitMsP90.toFixed(0)}), ` +
      `${String(s.waitSteps).padStart(3)} steps; step ${s.stepMs.toFixed(1)} ms (p99 ${s.stepMsP99.toFixed(1)}); ` +
      `busy prompt +${s.busyTokens} tokens over ${s.steps} steps`,
  );
}
console.log(
  `ratio (token count / position): probe wait ${(tokens.waitMs / priced.waitMs).toFixed(1)}x; step time ` +
    `${(tokens.stepMs / priced.stepMs).toFixed(2)}x; busy prompt's tokens a step ` +
    `${(priced.busyTokens / priced.steps / (tokens.busyTokens / tokens.steps)).toFixed(2)}x; probes' first tokens identical`,
);
