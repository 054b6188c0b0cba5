import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from './half.js';

test('f16 round trips every finite half value', () => {
  for (let h = 0; h < 0x10000; h++) {
    const exp = (h >> 10) & 0x1f;
    if (exp === 0x1f) continue;
    const back = f32ToF16(f16ToF32(h));
    // -0 and +0 are distinct bit patterns and both survive.
    assert.equal(back, h, `half 0x${h.toString(16)}`);
  }
});

test('f16 rounds to nearest even and saturates to infinity', () => {
  assert.equal(f32ToF16(1), 0x3c00);
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00); // exact tie: stays even
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02); // tie rounds up to even
  assert.equal(f32ToF16(70000), 0x7c00);
  assert.equal(f32ToF16(-(2 ** -25)), 0x8000);
  assert.equal(f16ToF32(0x0001), 2 ** -24);
});

test('bf16 rounds to nearest even', () => {
  assert.equal(f32ToBf16(1), 0x3f80);
  assert.equal(bf16ToF32(0x3f80), 1);
  assert.equal(f32ToBf16(1 + 2 ** -8), 0x3f80); // tie: even
  assert.equal(f32ToBf16(1 + 3 * 2 ** -8), 0x3f82);
});
