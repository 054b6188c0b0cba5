import assert from 'node:assert/strict';
import { test } from 'node:test';
import { median } from './median.js';

test('the middle value, the mean of the middle two for an even count, NaN for none; the input is not reordered', () => {
  const values = [5, 1, 3];
  assert.equal(median(values), 3);
  assert.deepEqual(values, [5, 1, 3]);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([7]), 7);
  assert.ok(Number.isNaN(median([])));
});
