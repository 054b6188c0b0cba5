// The prompt tokens a step beside decoders may take: learned from the steps' times so the step lasts about the target.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PrefillPace } from './prefill-pace.js';

test('before any step was timed, a 64-token chunk (or the whole chunk when smaller)', () => {
  assert.equal(new PrefillPace(50, 512, 2048).promptTokens(true), 64);
  assert.equal(new PrefillPace(50, 32, 2048).promptTokens(true), 32);
});

test('prompt tokens take the target, whatever the decoders take; a mixed step is split into both costs', () => {
  const pace = new PrefillPace(50, 512, 2048);
  pace.record(512, false, 512); // prompts alone: 1 ms a prompt token
  assert.equal(pace.promptTokens(true), 50);
  pace.record(0, true, 10); // decoding alone: 10 ms a step
  assert.equal(pace.promptTokens(true), 50);
  pace.record(40, true, 10 + 40 * 1); // a mixed step at the same costs changes nothing
  assert.equal(pace.promptTokens(true), 50);
  for (let i = 0; i < 30; i++) pace.record(40, true, 10 + 40 * 2); // prompt tokens got twice as dear
  assert.equal(pace.promptTokens(true), 25);
});

test('slower prompt tokens shrink the chunk towards a page, faster ones grow it up to the chunk maximum', () => {
  const slow = new PrefillPace(50, 512, 2048);
  for (let i = 0; i < 50; i++) slow.record(64, false, 64 * 100);
  assert.equal(slow.promptTokens(true), 16, 'never below a page of 16 tokens');
  const fast = new PrefillPace(50, 512, 2048);
  for (let i = 0; i < 50; i++) fast.record(512, false, 5);
  assert.equal(fast.promptTokens(true), 512, 'never above the chunk maximum');
});

test('the newest steps count most: a model that got slower is followed within a few steps', () => {
  const pace = new PrefillPace(100, 512, 2048);
  pace.record(100, false, 100);
  assert.equal(pace.promptTokens(true), 100);
  for (let i = 0; i < 20; i++) pace.record(100, false, 400);
  assert.ok(pace.promptTokens(true) <= 26, `${pace.promptTokens(true)} tokens after the slowdown`);
  pace.record(4, false, 4000); // too few prompt tokens to say anything about prefill
  assert.ok(pace.promptTokens(true) >= 25);
});

test('a step timed at zero cannot divide by zero', () => {
  const pace = new PrefillPace(50, 256, 2048);
  pace.record(0, true, 50);
  pace.record(64, true, 0);
  assert.equal(pace.promptTokens(true), 256);
  pace.record(0, true, 0);
  pace.record(64, false, 0);
  pace.record(0, true, 50);
  assert.ok(Number.isInteger(pace.promptTokens(true)));
});

test('prompts alone may take four times the target, up to the step budget; before any timing, one chunk', () => {
  const pace = new PrefillPace(50, 512, 2048);
  assert.equal(pace.promptTokens(false), 512);
  pace.record(512, false, 512); // 1 ms a prompt token
  pace.record(0, true, 10);
  assert.equal(pace.promptTokens(false), 200);
  assert.equal(pace.promptTokens(true), 50);
  const fast = new PrefillPace(50, 512, 2048);
  fast.record(512, false, 1);
  assert.equal(fast.promptTokens(false), 2048);
});
