import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../util/random.js';
import { argmax, logSoftmax, Sampler, SamplingScratch } from './sampler.js';
import { selectTopK, selectTopMass } from './select.js';
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

test('top-k and top-p sets by partition equal the sorted definition', () => {
  const random = new SeededRandom(5);
  for (let round = 0; round < 300; round++) {
    const n = 1 + random.nextInt(400);
    const values = randomLogits(random, n);
    const order = ranked(values);
    const ids = Int32Array.from(order.slice().reverse()); // worst case for naive pivots
    const k = 1 + random.nextInt(order.length);
    if (order.length === 0) continue;
    selectTopK(values, ids, order.length, k);
    assert.deepEqual(
      [...ids.subarray(0, k)].sort((a, b) => a - b),
      order.slice(0, k).sort((a, b) => a - b),
    );

    const weights = new Float64Array(n);
    for (const id of order) weights[id] = Math.exp(values[id]! - values[order[0]!]!);
    const total = order.reduce((s, id) => s + weights[id]!, 0);
    const need = (0.05 + 0.9 * random.next()) * total;
    let cumulative = 0;
    let expected = order.length;
    for (let i = 0; i < order.length; i++) {
      cumulative += weights[order[i]!]!;
      if (cumulative >= need) {
        expected = i + 1;
        break;
      }
    }
    const ids2 = Int32Array.from(order.slice().reverse());
    const count = selectTopMass(values, weights, ids2, order.length, need);
    assert.equal(count, expected);
    assert.deepEqual(
      [...ids2.subarray(0, count)].sort((a, b) => a - b),
      order.slice(0, count).sort((a, b) => a - b),
    );
  }
});

test('a draw is the inverse CDF over the kept tokens in id order (the documented change from probability order)', () => {
  const random = new SeededRandom(21);
  const scratch = new SamplingScratch(300);
  for (let round = 0; round < 200; round++) {
    const values = randomLogits(random, 300);
    const params = {
      temperature: 0.3 + random.next(),
      topK: random.nextInt(3) * 20,
      topP: 1 - random.next() * 0.5,
      seed: round,
    };
    const got = new Sampler(params).sample(values, scratch);
    // reference: sorted kept set, then walk it in id order with the same uniform draw
    const order = ranked(values);
    const top = params.topK > 0 ? order.slice(0, params.topK) : order;
    const w = (id: number) => Math.exp((values[id]! - values[order[0]!]!) / params.temperature);
    const total = top.reduce((s, id) => s + w(id), 0);
    let kept = top.length;
    let cumulative = 0;
    for (let i = 0; i < top.length; i++) {
      cumulative += w(top[i]!);
      if (cumulative >= params.topP * total) {
        kept = i + 1;
        break;
      }
    }
    const keptIds = top.slice(0, kept).sort((a, b) => a - b);
    let u = new SeededRandom(params.seed).next() * keptIds.reduce((s, id) => s + w(id), 0);
    let expected = keptIds[keptIds.length - 1]!;
    for (const id of keptIds) {
      u -= w(id);
      if (u < 0) {
        expected = id;
        break;
      }
    }
    assert.equal(got, expected, `round ${round}`);
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
    const values = Float32Array.from({ length: 500 }, () => (random.next() < 0.3 ? 0.5 : Math.fround(random.normal())));
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
