import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { expNeg } from '../util/exp-neg.js';
import { SeededRandom } from '../util/random.js';
import { argmax, logSoftmax, Sampler, type SamplingParams, SamplingScratch } from './sampler.js';
import { bucketOf, bucketScale, collect, NO_BUCKET, RANK_BUCKETS, RankScratch, sortByRank } from './select.js';
import { describeToken } from './token-logprobs.js';

const logits = Float32Array.from([0.5, 2, 1.5, -1, 2, 0]);

test('greedy takes the highest logit, ties to the lowest id', () => {
  assert.equal(argmax(logits), 1);
  assert.equal(new Sampler({ temperature: 0, topK: 0, topP: 1, seed: 9 }).sample(logits), 1);
});

test('log-softmax is normalized', () => {
  const lp = logSoftmax(logits);
  assert.ok(Math.abs(lp.reduce((s, v) => s + Math.exp(v), 0) - 1) < 1e-12);
});

test('the same seed gives the same tokens; another seed differs', () => {
  const run = (seed: number) => {
    const s = new Sampler({ temperature: 1.5, topK: 0, topP: 1, seed });
    return Array.from({ length: 64 }, () => s.sample(logits));
  };
  assert.deepEqual(run(7), run(7));
  assert.notDeepEqual(run(7), run(8));
});

test('top-k and top-p only ever pick from the kept set', () => {
  const k = new Sampler({ temperature: 1, topK: 2, topP: 1, seed: 1 });
  for (let i = 0; i < 200; i++) assert.ok([1, 4].includes(k.sample(logits)));
  // top-p 0.5: tokens 1 and 4 (equal, highest) together hold more than half the mass
  const p = new Sampler({ temperature: 1, topK: 0, topP: 0.5, seed: 2 });
  const seen = new Set(Array.from({ length: 200 }, () => p.sample(logits)));
  assert.ok([...seen].every((t) => [1, 4].includes(t)));
  assert.equal(seen.size, 2);
});

/** Random logits with ties and forbidden (-Infinity) tokens. */
function randomLogits(random: SeededRandom, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => {
    const r = random.next();
    if (r < 0.05) return Number.NEGATIVE_INFINITY;
    if (r < 0.2) return 1.25; // ties
    return Math.fround(random.normal() * 3);
  });
}

/** The definition the selections implement: ids by logit, higher first, ties to the lower id. */
function ranked(values: Float32Array): number[] {
  return Array.from(values.keys())
    .filter((i) => values[i] !== Number.NEGATIVE_INFINITY)
    .sort((a, b) => values[b]! - values[a]! || a - b);
}

test('sortByRank orders the candidates as the sorted definition (ties, -0 and +0 included)', () => {
  const random = new SeededRandom(5);
  for (let round = 0; round < 300; round++) {
    const n = 1 + random.nextInt(3000);
    const values = randomLogits(random, n);
    const rank = new RankScratch(n);
    const order = ranked(values);
    let max = Number.NEGATIVE_INFINITY;
    let min = Number.POSITIVE_INFINITY;
    for (const id of order) [max, min] = [Math.max(max, values[id]!), Math.min(min, values[id]!)];
    const scale = bucketScale(max, min);
    const last = random.nextInt(RANK_BUCKETS);
    values.forEach((l, i) => {
      rank.buckets[i] = l === Number.NEGATIVE_INFINITY ? NO_BUCKET : bucketOf(l, max, scale);
    });
    const m = collect(rank, n, 0, last);
    sortByRank(values, m, rank);
    // buckets 0..last hold a prefix of the ranking, and the sort orders it
    assert.deepEqual([...rank.byRank.subarray(0, m)], order.slice(0, m), `round ${round}`);
    assert.deepEqual(
      [...rank.byId.subarray(0, m)],
      order.slice(0, m).sort((x, y) => x - y),
    );
  }
});

/**
 * The definition the sampler implements, written the straightforward way: rank every finite token (sort), keep the
 * top k, weights exp((logit - max) / temperature), total in id order, the shortest rank prefix whose cumulative mass
 * (in rank order) reaches top_p × total, then the inverse CDF over the kept tokens in id order.
 */
function referenceSample(values: Float32Array, p: SamplingParams, random: SeededRandom): number {
  if (p.temperature === 0) return argmax(values);
  const order = ranked(values);
  const top = p.topK > 0 && p.topK < order.length ? order.slice(0, p.topK) : order;
  const w = (id: number) => expNeg((values[order[0]!]! - values[id]!) / p.temperature);
  const total = [...top].sort((x, y) => x - y).reduce((s, id) => s + w(id), 0);
  let kept = top.length;
  let cumulative = 0;
  for (let i = 0; i < top.length && p.topP < 1; i++) {
    cumulative += w(top[i]!);
    if (cumulative >= p.topP * total) {
      kept = i + 1;
      break;
    }
  }
  const keptIds = top.slice(0, kept).sort((x, y) => x - y);
  let u = random.next() * keptIds.reduce((s, id) => s + w(id), 0);
  for (const id of keptIds) {
    u -= w(id);
    if (u < 0) return id;
  }
  return keptIds[keptIds.length - 1]!;
}

/** Logits with what makes sampling hard: ties (one value, or several), masked tokens, -0 beside 0, wide spreads. */
const arbitraryLogits = fc
  .record({
    n: fc.integer({ min: 1, max: 2500 }),
    masked: fc.constantFrom(0, 0.05, 0.5, 0.99),
    tied: fc.constantFrom(0, 0.2, 0.9, 1),
    spread: fc.constantFrom(0.01, 1, 3, 30, 1000),
    seed: fc.integer(),
  })
  .map(({ n, masked, tied, spread, seed }) => {
    const random = new SeededRandom(seed);
    const ties = [0, -0, 1.25, -3, Math.fround(spread)];
    const values = Float32Array.from({ length: n }, () => {
      if (random.next() < masked) return Number.NEGATIVE_INFINITY;
      if (random.next() < tied) return ties[random.nextInt(ties.length)]!;
      return Math.fround(random.normal() * spread);
    });
    if (values.every((l) => l === Number.NEGATIVE_INFINITY)) values[random.nextInt(n)] = 0;
    return values;
  });

const arbitraryParams = fc.record({
  temperature: fc.oneof(
    fc.constant(0),
    fc.double({ min: 0.001, max: 0.1, noNaN: true }),
    fc.double({ min: 0.1, max: 3, noNaN: true }),
    fc.double({ min: 3, max: 1000, noNaN: true }),
  ),
  topK: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 3000 })),
  topP: fc.oneof(
    fc.constant(1),
    fc.double({ min: 1e-12, max: 0.01, noNaN: true }),
    fc.constantFrom(0.5, 0.9, 0.95),
    fc.double({ min: 0.99, max: 1, noNaN: true }),
    fc.double({ min: 1e-6, max: 1, noNaN: true }),
  ),
  seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
});

test('sample draws what the sort-all definition draws, seed for seed (property, differential)', () => {
  fc.assert(
    fc.property(fc.array(arbitraryLogits, { minLength: 1, maxLength: 4 }), arbitraryParams, (steps, params) => {
      const sampler = new Sampler(params);
      const random = new SeededRandom(params.seed);
      for (const values of steps) {
        const scratch = new SamplingScratch(values.length);
        assert.equal(sampler.sample(values, scratch), referenceSample(values, params, random));
      }
    }),
    { numRuns: 600 },
  );
});

/** A top_p that puts top_p × total on (nudge 0) or one rounding step beside a prefix's mass in rank order. */
function topPAtPrefix(values: Float32Array, p: SamplingParams, prefix: number, nudge: number): number {
  const order = ranked(values);
  const top = p.topK > 0 && p.topK < order.length ? order.slice(0, p.topK) : order;
  const w = (id: number) => expNeg((values[order[0]!]! - values[id]!) / p.temperature);
  const total = [...top].sort((x, y) => x - y).reduce((s, id) => s + w(id), 0);
  let mass = 0;
  for (const id of top.slice(0, 1 + (prefix % top.length))) mass += w(id);
  return Math.min(1, Math.max(Number.MIN_VALUE, (mass / total) * (1 + nudge * 2 ** -52)));
}

test('top_p right at a prefix mass (where sums in another order round across the cut) draws as the definition', () => {
  fc.assert(
    fc.property(
      arbitraryLogits,
      arbitraryParams.filter((p) => p.temperature > 0),
      fc.nat(),
      fc.constantFrom(-1, 0, 1),
      (values, params, prefix, nudge) => {
        const p = { ...params, topP: topPAtPrefix(values, params, prefix, nudge) };
        const got = new Sampler(p).sample(values, new SamplingScratch(values.length));
        assert.equal(got, referenceSample(values, p, new SeededRandom(p.seed)));
      },
    ),
    { numRuns: 1500 },
  );
});

test('at Llama 3 size (128,256 logits), temperature 1.5 and top_p 0.95 (alone, with top_k 40) draw as the definition', () => {
  const V = 128_256;
  const scratch = new SamplingScratch(V);
  const random = new SeededRandom(31);
  for (let round = 0; round < 6; round++) {
    const values = Float32Array.from({ length: V }, () => Math.fround(random.normal() * 2.5));
    for (let k = 0; k < 20; k++) values[random.nextInt(V)] = Math.fround(8 + 10 * random.next());
    if (round % 2 === 1) for (let i = 0; i < V; i += 3) values[i] = Number.NEGATIVE_INFINITY; // a grammar's mask
    const params = { temperature: 1.5, topK: round < 4 ? 0 : 40, topP: 0.95, seed: round };
    const sampler = new Sampler(params);
    const reference = new SeededRandom(round);
    for (let draw = 0; draw < 3; draw++) {
      assert.equal(sampler.sample(values, scratch), referenceSample(values, params, reference), `round ${round}`);
    }
  }
});

test('draws follow the tempered softmax and never pick a forbidden token', () => {
  const values = Float32Array.from([1, 0, Number.NEGATIVE_INFINITY, 2, -1]);
  const sampler = new Sampler({ temperature: 0.8, topK: 0, topP: 1, seed: 4 });
  const counts = [0, 0, 0, 0, 0];
  const draws = 40_000;
  const scratch = new SamplingScratch(values.length);
  for (let i = 0; i < draws; i++) counts[sampler.sample(values, scratch)]!++;
  assert.equal(counts[2], 0);
  const z = [1, 0, 2, -1].reduce((s, v) => s + Math.exp(v / 0.8), 0);
  for (const [id, v] of [
    [0, 1],
    [1, 0],
    [3, 2],
    [4, -1],
  ] as const) {
    const p = Math.exp(v / 0.8) / z;
    const sd = Math.sqrt((p * (1 - p)) / draws);
    assert.ok(Math.abs(counts[id]! / draws - p) < 5 * sd, `token ${id}: ${counts[id]! / draws} vs ${p}`);
  }
});

test('logprobs and top alternatives in one pass equal the sort over the whole vocabulary', () => {
  const random = new SeededRandom(8);
  for (let round = 0; round < 100; round++) {
    const values = Float32Array.from({ length: 500 }, () => {
      const r = random.next();
      if (r < 0.05) return Number.NEGATIVE_INFINITY;
      if (r < 0.1) return [0, -0, 1e-30, -1e-30][random.nextInt(4)]!; // logSum swamps these: equal logprobs
      return r < 0.3 ? 0.5 : Math.fround(random.normal());
    });
    const lsm = logSoftmax(values);
    const sorted = Array.from(lsm.keys()).sort((a, b) => lsm[b]! - lsm[a]! || a - b);
    const topCount = random.nextInt(21);
    const got = describeToken(values, 17, topCount);
    assert.equal(got.logprob, lsm[17]);
    assert.deepEqual(
      got.top,
      sorted.slice(0, topCount).map((id) => ({ id, logprob: lsm[id]! })),
    );
  }
});
