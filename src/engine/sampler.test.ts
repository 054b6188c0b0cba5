import assert from 'node:assert/strict';
import { test } from 'node:test';
import { argmax, logSoftmax, Sampler } from './sampler.js';

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
