import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LIMITS } from '../util/limits.js';
import { LONG_PASS_MS, LongPassNotice, WINDOW } from './long-pass.js';

test('a pass nothing seen foretells is announced at the bound; one foretold short is not announced', () => {
  const said: (number | undefined)[] = [];
  const notice = new LongPassNotice((ms) => said.push(ms));
  notice.before(512);
  assert.deepEqual(said, [LIMITS.workerBusyMsMax]);
  notice.after(512, 10); // the announced pass ended: said at once
  assert.deepEqual(said, [LIMITS.workerBusyMsMax, undefined]);
  notice.before(512);
  notice.after(512, 10);
  notice.before(100); // fewer tokens: at most what 512 took, doubled
  assert.deepEqual(said, [LIMITS.workerBusyMsMax, undefined], 'a pass not announced: no end either');
  assert.ok(notice.boundMs(100) <= 20);
});

test('a long pass bounds the next ones: larger passes scaled up from it, smaller ones by it', () => {
  const said: (number | undefined)[] = [];
  const notice = new LongPassNotice((ms) => said.push(ms));
  notice.after(64, 3_000);
  notice.before(64);
  notice.before(512);
  assert.deepEqual(said, [6_000, 48_000]);
  notice.after(32, 5); // a small pass that was quick: a 64-token one is bounded by it scaled, not by the slow one
  assert.equal(notice.boundMs(64), 20);
  assert.ok(notice.boundMs(8) < LONG_PASS_MS);
});

test('a slow outlier bounds its size for one to two windows of passes, then the recent ones do', () => {
  const notice = new LongPassNotice(() => {});
  notice.after(256, 4_000); // the first pass, paging the weights in
  for (let i = 0; i < WINDOW - 1; i++) notice.after(256, 500);
  assert.equal(notice.boundMs(256), 8_000, 'within its window');
  for (let i = 0; i < WINDOW; i++) notice.after(256, 500);
  assert.equal(notice.boundMs(256), 8_000, 'the window after it still remembers it');
  notice.after(256, 500);
  assert.equal(notice.boundMs(256), 1_000, 'two windows on: the recent passes alone');
});
