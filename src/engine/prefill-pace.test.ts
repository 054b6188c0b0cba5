// A step's prompt budget and prices, learned from the steps' times so the step lasts about the target; a token's price
// grows with the keys its attention reads.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PrefillPace, type StepTime } from './prefill-pace.js';

/** Keys of n tokens from `start` on a one-layer model without sliding windows */
const keysOf = (start: number, n: number) => n * start + (n * (n + 1)) / 2;

/** How many prompt tokens from `start` the next step's budget buys (a prompt alone in the step). */
function tokens(pace: PrefillPace, decoding: boolean, start = 0): number {
  const { budget, cost } = pace.promptCost(decoding);
  let n = 0;
  while (n < 100_000 && cost(start, n + 1) <= budget) n++;
  return n;
}

/** A step without attention time: only its prompt and decode parts. */
const step = (promptTokens: number, decoded: boolean, ms: number): StepTime => ({
  promptTokens,
  decoded,
  ms,
  attention: { ms: 0, keys: 0 },
});

test('before any step was timed, 64 tokens beside decoders and a chunk alone', () => {
  const pace = new PrefillPace(50, 512, keysOf);
  assert.equal(tokens(pace, true), 64);
  assert.equal(tokens(pace, false), 512);
});

test('prompt tokens take the target, whatever the decoders take; a mixed step is split into both costs', () => {
  const pace = new PrefillPace(50, 512, keysOf);
  pace.record(step(512, false, 512)); // prompts alone: 1 ms a prompt token
  assert.equal(tokens(pace, true), 50);
  pace.record(step(0, true, 10)); // decoding alone: 10 ms a step
  assert.equal(tokens(pace, true), 50);
  pace.record(step(40, true, 10 + 40 * 1)); // a mixed step at the same costs changes nothing
  assert.equal(tokens(pace, true), 50);
  for (let i = 0; i < 30; i++) pace.record(step(40, true, 10 + 40 * 2)); // prompt tokens got twice as dear
  assert.equal(tokens(pace, true), 25);
});

test('slower prompt tokens shrink the budget to a page of them at least; prompts alone may take four times the target', () => {
  const slow = new PrefillPace(50, 512, keysOf);
  for (let i = 0; i < 50; i++) slow.record(step(64, false, 64 * 100));
  assert.equal(tokens(slow, true), 16, 'never below a page of 16 tokens');
  const pace = new PrefillPace(50, 512, keysOf);
  pace.record(step(512, false, 512)); // 1 ms a prompt token
  assert.equal(tokens(pace, false), 200);
  assert.equal(tokens(pace, true), 50);
});

test('the newest steps count most: a model that got slower is followed within a few steps', () => {
  const pace = new PrefillPace(100, 512, keysOf);
  pace.record(step(100, false, 100));
  assert.equal(tokens(pace, true), 100);
  for (let i = 0; i < 20; i++) pace.record(step(100, false, 400));
  assert.ok(tokens(pace, true) <= 26, `${tokens(pace, true)} tokens after the slowdown`);
  pace.record(step(4, false, 4000)); // too few prompt tokens to say anything about prefill
  assert.ok(tokens(pace, true) >= 25);
});

test('a step timed at zero cannot divide by zero', () => {
  const pace = new PrefillPace(50, 256, keysOf);
  for (const s of [step(0, true, 50), step(64, true, 0), step(0, true, 0), step(64, false, 0), step(0, true, 50)])
    pace.record(s);
  pace.record({ promptTokens: 64, decoded: false, ms: 0, attention: { ms: 0, keys: 100 } });
  const { budget, cost } = pace.promptCost(true);
  assert.ok(Number.isFinite(budget) && budget > 0 && Number.isFinite(cost(1000, 64)));
  assert.ok(tokens(pace, true) >= 1000);
});

test("attention's time is priced by the keys read: deep into a prompt a step buys fewer tokens", () => {
  const pace = new PrefillPace(50, 512, keysOf);
  // 64 tokens at the start: 64 ms besides attention, and 2,080 keys read in 0.0208 ms (10 ns a key)
  pace.record({ promptTokens: 64, decoded: false, ms: 64.0208, attention: { ms: 0.0208, keys: keysOf(0, 64) } });
  assert.equal(tokens(pace, true, 0), 49, 'at the start: ~1 ms a token');
  assert.equal(tokens(pace, true, 100_000), 24, '100,000 tokens in, a token reads 100,000 keys: 1 ms more');
  assert.equal(tokens(pace, true, 1_000_000), 4, '1,000,000 tokens in: 11 ms a token');
  // the split holds beside decoders: their steps' attention is not counted as their fixed cost
  pace.record({ promptTokens: 0, decoded: true, ms: 30, attention: { ms: 20, keys: 2_000_000 } });
  pace.record({ promptTokens: 16, decoded: true, ms: 10 + 16 + 36, attention: { ms: 36, keys: 3_600_000 } });
  assert.equal(tokens(pace, true, 0), 49, 'the same 1 ms a token besides attention, and 10 ns a key');
  assert.equal(tokens(pace, true, 100_000), 24);
});
