import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ForwardScratch } from './forward-scratch.js';

test('a role gets the same memory call after call, exactly as long as asked, growing only when asked for more', () => {
  const scratch = new ForwardScratch();
  const first = scratch.take('x', 100);
  assert.equal(first.length, 100);
  first[99] = 5;
  const smaller = scratch.take('x', 40);
  assert.equal(smaller.length, 40);
  assert.equal(smaller.buffer, first.buffer);
  assert.notEqual(scratch.take('xb', 40).buffer, first.buffer, 'each role has its own memory');
  assert.equal(scratch.retained, 140);
  const grown = scratch.take('x', 101);
  assert.notEqual(grown.buffer, first.buffer);
  assert.equal(scratch.retained, 141, 'the outgrown buffer is no longer counted');
  assert.equal(scratch.take('x', 7).buffer, grown.buffer);
});

test('past 64 MiB in all a buffer is handed out for that call only and the kept ones stay', () => {
  const scratch = new ForwardScratch();
  const quarter = (16 * 1024 * 1024) / 4;
  const gate = scratch.take('gate', 3 * quarter);
  const up = scratch.take('up', quarter + 1);
  assert.equal(up.length, quarter + 1);
  assert.equal(scratch.retained, 3 * quarter, 'over the bound: not kept');
  assert.notEqual(scratch.take('up', 4).buffer, up.buffer);
  assert.equal(scratch.take('gate', 5).buffer, gate.buffer);
  assert.equal(scratch.retained, 3 * quarter + 4);
});
