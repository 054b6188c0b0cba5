/**
 * The prefix cache against the same engine with the cache off, in the same run: one tenant's requests that share a
 * long head (a system prompt) and differ in a short tail, all submitted at once, on the embedded model with the native
 * backend. Prints the median wall time of each, their ratio, and checks that both gave the same tokens.
 *
 *   npm run bench:prefix -- [--requests 16] [--head 384] [--tail 32] [--max-tokens 8] [--runs 3]
 */
import { ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import { Engine } from '../src/engine/engine.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { GREEDY } from '../src/engine/sampler.js';
import { makeKvLayout } from '../src/kv/kv-layout.js';
import { PagePool } from '../src/kv/page-pool.js';
import { PrefixCache } from '../src/kv/prefix-cache.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../src/model/default-model.js';
import { loadModel } from '../src/model/load-model.js';
import { median } from '../src/util/median.js';
import { benchPrompt, numberFlag } from './bench-types.js';

const PAGE_SIZE = 16;

const arg = (name: string, fallback: number) => numberFlag(process.argv, name, fallback);

const requests = arg('requests', 16);
const head = arg('head', 384);
const tail = arg('tail', 32);
const maxTokens = arg('max-tokens', 8);
const runs = arg('runs', 3);

const model = loadModel(ensureGeneratedModel(DEFAULT_MODEL));
const backend = new NativeBackend({ threadCount: 2 });
const c = model.config;
const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, PAGE_SIZE);
const shared = benchPrompt(c.vocabSize, head, 1);
const work: GenerationRequest[] = Array.from({ length: requests }, (_, i) => ({
  id: `r${i}`,
  tenant: 'bench',
  promptTokens: [...shared, ...benchPrompt(c.vocabSize, tail, i + 2)],
  maxTokens,
  sampling: GREEDY,
  topLogprobs: 0,
  tenantKvPagesMax: 1 << 20,
}));

/** Runs every request to its end; returns the wall time and each request's tokens. */
function run(cached: boolean): { seconds: number; tokens: string } {
  const pageCount = requests * Math.ceil((head + tail + maxTokens) / PAGE_SIZE) + 64;
  const forward = new ForwardPass(model, backend, new PagePool(layout, pageCount));
  const engine = new Engine(
    {
      provenContext: c.contextLength,
      vocabSize: c.vocabSize,
      runningMax: requests,
      waitingMax: requests,
      queueTimeoutMs: 600_000,
      prefillChunkTokens: 512,
      stepTokenBudget: 2048,
      isStopToken: () => false,
    },
    forward,
    cached ? { prefixCache: new PrefixCache(forward.pool, 64) } : {},
  );
  const out = new Map<string, number[]>();
  const started = performance.now();
  // the first request alone (it fills the cache), then the rest at once
  engine.submit(work[0]!, 0);
  for (let step = 0; engine.hasWork; step++) {
    if (step === 1) for (const r of work.slice(1)) engine.submit(r, 0);
    for (const e of engine.step(0)) {
      if (e.kind === 'token') out.set(e.request, [...(out.get(e.request) ?? []), e.token.id]);
      else if (e.kind === 'end' && e.end.kind === 'failed') throw e.end.error;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  return { seconds, tokens: JSON.stringify(work.map((r) => out.get(r.id))) };
}

const on: number[] = [];
const off: number[] = [];
let reference: string | undefined;
for (let i = 0; i < runs; i++) {
  for (const cached of [false, true]) {
    const r = run(cached);
    (cached ? on : off).push(r.seconds);
    reference ??= r.tokens;
    if (r.tokens !== reference) throw new Error('the prefix cache changed an answer');
  }
}
const tokens = requests * (head + tail);
console.log(
  `${requests} requests of one tenant: ${head}-token shared head + ${tail}-token tail, ${maxTokens} tokens out; ` +
    `${model.config.name}, native backend, 2 threads, ${runs} runs`,
);
console.log(`cache off: median ${median(off).toFixed(2)} s (${(tokens / median(off)).toFixed(0)} prompt tokens/s)`);
console.log(`cache on:  median ${median(on).toFixed(2)} s (${(tokens / median(on)).toFixed(0)} prompt tokens/s)`);
console.log(`ratio (off / on): ${(median(off) / median(on)).toFixed(2)}x; answers identical`);
