/**
 * The page checksum is XXH64 with seed 0 whoever computes it: the addon's gives xxhash-wasm's values on every length
 * (every tail: the 32-byte stripes, then 8-, 4- and 1-byte steps) and on pages that start at any offset of their
 * buffer, and both give the published values of the reference implementation.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { loadAddon } from '../compute/native-backend.js';
import { createPageChecksum } from './page-checksum.js';

test('XXH64 by the addon and by xxhash-wasm agree on every length and offset, and with the reference values', async () => {
  loadAddon(); // a missing or stale addon fails here with its reason
  const native = await createPageChecksum();
  const wasm = await createPageChecksum('wasm');
  assert.equal(native.by, 'native', 'the addon computes the checksum where it is built');
  assert.equal(wasm.by, 'wasm');
  for (const c of [native, wasm]) {
    assert.equal(c.of(new Uint8Array(0)), 0xef46db3751d8e999n, c.by);
    assert.equal(c.of(new TextEncoder().encode('abc')), 0x44bc2cf5ad770999n, c.by);
  }
  for (let n = 0; n <= 200; n++) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 131 + n) & 0xff);
    assert.equal(native.of(bytes), wasm.of(bytes), `${n} bytes`);
  }
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 5000 }), fc.nat(63), (bytes, offset) => {
      const shifted = new Uint8Array(offset + bytes.byteLength);
      shifted.set(bytes, offset);
      const page = shifted.subarray(offset);
      assert.equal(native.of(page), wasm.of(bytes));
    }),
    { numRuns: 300 },
  );
  const page = new Uint8Array(1 << 20).map((_, i) => (i * 2654435761) >>> 24);
  assert.equal(native.of(page), wasm.of(page));
});
