/**
 * What picking a token costs beside the decode step it follows, in one run on the 135m shape (vocabulary 49152):
 *   - the decode step itself: S streams in one forward call, native backend (the baseline every ratio divides by);
 *   - sampling at temperature 1 and top-5 logprobs, O(vocabulary) now, against the sort over the whole vocabulary they
 *     replaced (written out below as the baseline);
 *   - structured outputs: S streams each following a JSON schema on the model's real logits, from a fresh mask cache:
 *     the token masks alone (the goal's measure) and the whole SequenceSampler.choose (mask + masking + draw).
 *   - a heavy sampler (the review of top_p): one stream at temperature 1.5, top_p 0.95 (alone, and with top_k 40), with
 *     logprobs and top_logprobs 20 — the engine thread's whole work for its token (SequenceSampler.choose, then
 *     describeToken) at Llama 3's vocabulary (128,256) and at 32,000, against greedy (argmax) over the same logits in
 *     the same run. The logits are synthetic, shaped like a language model's: a bulk N(0, 2.5²) and 20 tokens 8-18
 *     above it; at temperature 1.5 the top_p 0.95 nucleus then holds ~40% of the vocabulary (~50,000 tokens at 128k).
 * Goal (issue 14): structured sampling for 16 streams under 10% of a 16-stream decode step. Medians of --runs.
 *
 *   npm run bench:sampling -- [--model 135m-f16] [--streams 16] [--steps 24] [--runs 5] [--heavy-only]
 */
import { join } from 'node:path';
import { ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { argmax, logSoftmax, Sampler, SamplingScratch } from '../src/engine/sampler.js';
import { SequenceSampler, samplingEnv } from '../src/engine/sequence-sampler.js';
import { describeToken } from '../src/engine/token-logprobs.js';
import { makeKvLayout, pagesForTokens } from '../src/kv/kv-layout.js';
import { PagePool } from '../src/kv/page-pool.js';
import { newPageTable } from '../src/kv/page-table.js';
import { ensureGeneratedModel } from '../src/model/default-model.js';
import { loadModel } from '../src/model/load-model.js';
import type { TestPreset } from '../src/model/test-model.js';
import { grammarCacheFor } from '../src/structured/grammar-cache.js';
import { GrammarMatcher } from '../src/structured/grammar-matcher.js';
import { median } from '../src/util/median.js';
import { SeededRandom } from '../src/util/random.js';
import { benchPrompt, numberFlag } from './bench-types.js';

const argv = process.argv;
const spec = argv.includes('--model') ? argv[argv.indexOf('--model') + 1]! : '135m-f16';
const [preset, dtype] = spec.split('-') as [TestPreset, 'f32' | 'f16' | 'q8_0'];
const streams = numberFlag(argv, 'streams', 16);
const steps = numberFlag(argv, 'steps', 24);
const runs = numberFlag(argv, 'runs', 5);
/** --heavy-only: only the heavy sampler's rows (no model, no decode step) */
const heavyOnly = argv.includes('--heavy-only');

const model = loadModel(ensureGeneratedModel({ preset, arch: 'llama', dtype, seed: 1 }, join('.cache', 'bench')));
const V = model.config.vocabSize;
const backend = new NativeBackend({ threadCount: 2 });
const layout = makeKvLayout(model.config.layerCount, model.config.kvHeadCount * model.config.headDim, 16);
const ms = (from: number) => performance.now() - from;

/** Median ms of one decode step of all streams; also returns one stream's logits for the sampling measurements. */
function decodeStep(): { stepMs: number; logits: Float32Array[] } {
  const forward = new ForwardPass(model, backend, new PagePool(layout, streams * pagesForTokens(layout, 64 + steps)));
  const tables = Array.from({ length: streams }, (_, i) => newPageTable({ tenant: 'bench', request: `s${i}` }));
  let logits = tables.map((table, i) => {
    forward.pool.grow(table, pagesForTokens(layout, 64 + steps));
    const [out] = forward.run([{ table, tokens: benchPrompt(V, 32, i + 2), logits: 'last' }]);
    if (out === undefined || !out.ok) throw new Error('prefill failed');
    return out.logits;
  });
  const times: number[] = [];
  for (let step = 0; step < steps; step++) {
    const started = performance.now();
    const outs = forward.run(
      tables.map((table, i) => ({ table, tokens: [argmax(logits[i]!)], logits: 'last' as const })),
    );
    times.push(ms(started));
    logits = outs.map((o) => {
      if (!o.ok) throw o.error;
      return Float32Array.from(o.logits);
    });
  }
  for (const table of tables) forward.pool.releaseAll(table);
  return { stepMs: median(times), logits };
}

/** The sampler before this change: every token sorted by logit, then the draw walks that order. */
function sortSample(logits: Float32Array, random: SeededRandom): number {
  const ids = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
  const max = logits[ids[0]!]!;
  const weights = ids.map((id) => Math.exp(logits[id]! - max));
  let u = random.next() * weights.reduce((a, b) => a + b, 0);
  for (let i = 0; i < ids.length; i++) {
    u -= weights[i]!;
    if (u < 0) return ids[i]!;
  }
  return ids[ids.length - 1]!;
}

/** The logprobs before this change: the whole vocabulary's log-softmax sorted for the top alternatives. */
function sortTop(logits: Float32Array, count: number): number[] {
  const lsm = logSoftmax(logits);
  return Array.from(lsm.keys())
    .sort((a, b) => lsm[b]! - lsm[a]! || a - b)
    .slice(0, count);
}

function perCallUs(calls: number, f: (i: number) => void): number {
  const started = performance.now();
  for (let i = 0; i < calls; i++) f(i);
  return (ms(started) * 1000) / calls;
}

const SCHEMAS: Record<string, unknown> = {
  'mixed (objects, enums, integers, bounded strings, arrays)': {
    type: 'object',
    properties: {
      title: { type: 'string', maxLength: 24 },
      when: {
        type: 'object',
        properties: { day: { type: 'integer' }, month: { enum: ['jan', 'feb', 'mar'] } },
        required: ['day', 'month'],
        additionalProperties: false,
      },
      attendees: {
        type: 'array',
        maxItems: 4,
        items: {
          type: 'object',
          properties: { name: { type: 'string', maxLength: 12 }, rsvp: { type: 'boolean' } },
          required: ['name', 'rsvp'],
          additionalProperties: false,
        },
      },
    },
    required: ['title', 'when', 'attendees'],
    additionalProperties: false,
  },
  'free strings (the worst case: every step inside a string)': {
    type: 'object',
    properties: { a: { type: 'string' }, b: { type: 'string' } },
    required: ['a', 'b'],
    additionalProperties: false,
  },
  // DESIGN I11: 64 parses at every string position, their stacks below alike (string-mask.ts groups them)
  'anyOf 64 strings differing in minLength (64 parses in every string)': {
    type: 'array',
    items: { anyOf: Array.from({ length: 64 }, (_, i) => ({ type: 'string', minLength: i })) },
    minItems: 1000,
  },
};

interface StepCosts {
  /** the token masks alone (GrammarMatcher.fillMask): the part the goal is about */
  mask: number;
  /** the whole SequenceSampler.choose: penalties, mask, masking the logits, the draw */
  choose: number;
}

/**
 * ms per step for all streams over `steps` steps from a fresh cache (documents restart as they finish): the mean, and
 * the slowest step (first visits of grammar states pay their per-state precompute there).
 */
function structuredStep(schema: unknown, logits: Float32Array[]): { mean: StepCosts; slowest: StepCosts } {
  const env = samplingEnv(V, (id) => model.tokenizer.isEndOfGeneration(id), grammarCacheFor(model.tokenizer));
  // the per-vocabulary trie is built once per worker, at its first response format: not part of a step
  if (env.grammars!.index.vocabSize !== V) throw new Error('the token index covers the vocabulary');
  const constraint = { kind: 'json_schema' as const, schema };
  const scratch = new SamplingScratch(V);
  const bits = new Uint32Array(Math.ceil(V / 32));
  let serial = 0;
  const fresh = (i: number) => {
    const request: GenerationRequest = {
      id: `r${serial++}`,
      tenant: 'bench',
      promptTokens: [1],
      maxTokens: 4096,
      sampling: { temperature: 1, topK: 0, topP: 1, seed: serial },
      topLogprobs: 0,
      tenantKvPagesMax: 1 << 20,
      constraint,
    };
    // a second matcher, advanced with the same tokens, times the mask on its own
    const matcher = new GrammarMatcher(env.grammars!.compile(constraint, request.tenant));
    return { sampler: new SequenceSampler(request, env), matcher, logits: logits[i % logits.length]! };
  };
  const live = Array.from({ length: streams }, (_, i) => fresh(i));
  const masks: number[] = [];
  const chooses: number[] = [];
  for (let step = 0; step < steps; step++) {
    let mask = 0;
    let choose = 0;
    live.forEach((s, i) => {
      let started = performance.now();
      s.matcher.fillMask(bits);
      mask += ms(started);
      started = performance.now();
      const choice = s.sampler.choose(s.logits, scratch);
      choose += ms(started);
      if (choice.kind !== 'token' || choice.finished)
        live[i] = fresh(i); // a finished document: the next request
      else if (!s.matcher.accept(choice.id)) throw new Error('the mask allowed the chosen token');
    });
    masks.push(mask);
    chooses.push(choose);
  }
  const mean = (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length;
  return {
    mean: { mask: mean(masks), choose: mean(chooses) },
    slowest: { mask: Math.max(...masks), choose: Math.max(...chooses) },
  };
}

/** Synthetic logits shaped like a language model's (see the header): the bulk, and a few far above it. */
function lmLikeLogits(vocab: number, seed: number): Float32Array {
  const random = new SeededRandom(seed);
  const logits = Float32Array.from({ length: vocab }, () => Math.fround(random.normal() * 2.5));
  for (let k = 0; k < 20; k++) logits[random.nextInt(vocab)] = Math.fround(8 + 10 * random.next());
  return logits;
}

const HEAVY_VOCABS = [128_256, 32_000] as const;
const HEAVY_CASES = { 'top_p 0.95': 0, 'top_k 40 + top_p 0.95': 40 } as const;

/**
 * µs per token of greedy (argmax) and of the heavy sampler's token (choose + describeToken, top_logprobs 20), measured
 * in turn on the same logits, for one vocabulary and top_k.
 */
function heavyToken(vocab: number, topK: number, run: number): { greedy: number; heavy: number } {
  const logits = Array.from({ length: 4 }, (_, i) => lmLikeLogits(vocab, 100 * run + i));
  const env = samplingEnv(vocab, () => false);
  const scratch = new SamplingScratch(vocab);
  const sampler = new SequenceSampler(
    {
      id: 'heavy',
      tenant: 'bench',
      promptTokens: [1],
      maxTokens: 1 << 20,
      sampling: { temperature: 1.5, topK, topP: 0.95, seed: run },
      topLogprobs: 20,
      logprobs: true,
      tenantKvPagesMax: 1 << 20,
    },
    env,
  );
  const heavy = (i: number) => {
    const x = logits[i % logits.length]!;
    const choice = sampler.choose(x, scratch);
    if (choice.kind !== 'token') throw new Error('the heavy sampler drew a token');
    describeToken(x, choice.id, 20);
  };
  const greedy = (i: number) => argmax(logits[i % logits.length]!);
  perCallUs(8, heavy); // warm both up
  perCallUs(8, greedy);
  const times = { greedy: [] as number[], heavy: [] as number[] };
  for (let round = 0; round < 5; round++) {
    times.greedy.push(perCallUs(20, greedy));
    times.heavy.push(perCallUs(8, heavy));
  }
  return { greedy: median(times.greedy), heavy: median(times.heavy) };
}

const rows: string[][] = [];
const decode: number[] = [];
const sampleOld: number[] = [];
const sampleNew: number[] = [];
const topOld: number[] = [];
const topNew: number[] = [];
const structured = new Map<string, Record<'mask' | 'slowestMask' | 'choose', number[]>>();
const heavyRows = new Map<string, { greedy: number[]; heavy: number[] }>();
/** The decode step and what sampling and structured outputs add to it (the rows before the heavy sampler's). */
function stepCosts(run: number): void {
  const { stepMs, logits } = decodeStep();
  decode.push(stepMs);
  const random = new SeededRandom(run);
  const sampler = new Sampler({ temperature: 1, topK: 0, topP: 1, seed: run });
  const scratch = new SamplingScratch(V);
  sampleOld.push(perCallUs(20, (i) => sortSample(logits[i % streams]!, random)));
  sampleNew.push(perCallUs(200, (i) => sampler.sample(logits[i % streams]!, scratch)));
  topOld.push(perCallUs(20, (i) => sortTop(logits[i % streams]!, 5)));
  topNew.push(perCallUs(200, (i) => describeToken(logits[i % streams]!, 7, 5)));
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    const r = structuredStep(schema, logits);
    const entry = structured.get(name) ?? { mask: [], slowestMask: [], choose: [] };
    entry.mask.push(r.mean.mask);
    entry.slowestMask.push(r.slowest.mask);
    entry.choose.push(r.mean.choose);
    structured.set(name, entry);
  }
}

for (let run = 0; run < runs; run++) {
  process.stderr.write(`bench:sampling run ${run + 1}/${runs}\n`);
  if (!heavyOnly) stepCosts(run);
  for (const vocab of HEAVY_VOCABS) {
    for (const [name, topK] of Object.entries(HEAVY_CASES)) {
      const key = `${name}, vocabulary ${vocab.toLocaleString('en')}`;
      const r = heavyToken(vocab, topK, run);
      const entry = heavyRows.get(key) ?? { greedy: [], heavy: [] };
      entry.greedy.push(r.greedy);
      entry.heavy.push(r.heavy);
      heavyRows.set(key, entry);
    }
  }
}

if (!heavyOnly) {
  const stepMs = median(decode);
  const pct = (x: number) => `${((100 * x) / stepMs).toFixed(2)}% of the step`;
  rows.push([`decode step, ${streams} streams (${spec}, native, 2 threads)`, `${stepMs.toFixed(1)} ms`, 'baseline']);
  rows.push([
    'sample at temperature 1, per token: sort (before) → O(V) (now)',
    `${median(sampleOld).toFixed(0)} µs → ${median(sampleNew).toFixed(0)} µs`,
    `${(median(sampleOld) / median(sampleNew)).toFixed(1)}× faster`,
  ]);
  rows.push([
    'top-5 logprobs, per token: sort (before) → one pass (now)',
    `${median(topOld).toFixed(0)} µs → ${median(topNew).toFixed(0)} µs`,
    `${(median(topOld) / median(topNew)).toFixed(1)}× faster`,
  ]);
  rows.push([
    `sampling at temperature 1 for ${streams} streams (now)`,
    `${((streams * median(sampleNew)) / 1000).toFixed(2)} ms`,
    pct((streams * median(sampleNew)) / 1000),
  ]);
  for (const [name, r] of structured) {
    rows.push([`${name}:`, '', '']);
    for (const [label, values] of [
      ['  token masks, mean step', r.mask],
      ['  token masks, slowest step (first visits)', r.slowestMask],
      ['  whole structured sampling, mean step', r.choose],
    ] as const) {
      rows.push([`${label} (${streams} streams)`, `${median(values).toFixed(2)} ms`, pct(median(values))]);
    }
  }
}
rows.push(['a heavy token (temperature 1.5, top_logprobs 20) against greedy on the same logits:', '', '']);
for (const [key, r] of heavyRows) {
  const [greedy, heavy] = [median(r.greedy), median(r.heavy)];
  rows.push([
    `  ${key}`,
    `${heavy.toFixed(0)} µs vs ${greedy.toFixed(0)} µs`,
    `${(heavy / greedy).toFixed(1)}× greedy`,
  ]);
}
const width = Math.max(...rows.map((r) => r[0]!.length));
process.stdout.write(`medians of ${runs} runs, vocabulary ${V}\n`);
for (const r of rows) process.stdout.write(`${r[0]!.padEnd(width)}  ${r[1]!.padStart(22)}  ${r[2]}\n`);
