import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { expNeg } from './exp-neg.js';

test('expNeg is e^-x within 2e-13 relative wherever e^-x is a normal double, and exact at 0', () => {
  assert.equal(expNeg(0), 1);
  fc.assert(
    fc.property(fc.double({ min: 0, max: 708, noNaN: true }), (x) => {
      const want = Math.exp(-x);
      assert.ok(Math.abs(expNeg(x) - want) <= 2e-13 * want, `e^-${x}: ${expNeg(x)} against ${want}`);
    }),
    { numRuns: 20_000 },
  );
  // the table seams: each 1/256 of a power of two, and around them
  for (let k = 0; k < 256 * 16; k++) {
    const x = (k / 256) * Math.LN2;
    for (const at of [x, x * (1 - 2 ** -52), x * (1 + 2 ** -52)]) {
      const want = Math.exp(-at);
      assert.ok(Math.abs(expNeg(at) - want) <= 1e-15 * want, `e^-${at}`);
    }
  }
});

test('expNeg falls to 0 past the smallest subnormal, and gives 0 for NaN', () => {
  assert.ok(expNeg(744) > 0 && expNeg(744) <= Math.exp(-744) * 1.01);
  assert.equal(expNeg(746), 0);
  assert.equal(expNeg(Number.POSITIVE_INFINITY), 0);
  assert.equal(expNeg(Number.NaN), 0);
  for (let x = 700; x < 746; x += 0.37) assert.ok(expNeg(x) >= 0 && expNeg(x) <= 2 * Math.exp(-x) + Number.MIN_VALUE);
});
