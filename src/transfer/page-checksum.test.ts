/**
 * The page checksum is XXH64 with seed 0 whoever computes it: the addon's gives xxhash-wasm's values on every length
 * (every tail: the 32-byte stripes, then 8-, 4- and 1-byte steps) and on pages that start at any offset of their
 * buffer, and both give the published values of the reference implementation. Copying a page while hashing it (the
 * receiver's store into its pool) writes every byte where it belongs, touches nothing around it, and returns the
 * checksum of the page alone.
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
    fc.property(fc.uint8Array({ maxLength: 5000, size: 'max' }), fc.nat(63), (bytes, offset) => {
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

test('copyOf stores the page whole, and nothing around it, and returns its XXH64, by either implementation', async () => {
  const checksums = [await createPageChecksum(), await createPageChecksum('wasm')];
  assert.equal(checksums[0]!.by, 'native', 'the addon copies where it is built');
  for (const c of checksums) {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 5000, size: 'max' }), fc.nat(63), fc.nat(63), (bytes, from, to) => {
        const source = new Uint8Array(from + bytes.byteLength);
        source.set(bytes, from);
        const pool = new Uint8Array(to + bytes.byteLength + 64).fill(0xa5);
        const page = pool.subarray(to, to + bytes.byteLength);
        assert.equal(c.copyOf(source.subarray(from), page), checksums[1]!.of(bytes), c.by);
        assert.deepEqual(page, bytes, `${c.by}: the page is stored whole`);
        assert.ok(
          pool.subarray(0, to).every((b) => b === 0xa5),
          `${c.by}: nothing before the page`,
        );
        assert.ok(
          pool.subarray(to + bytes.byteLength).every((b) => b === 0xa5),
          `${c.by}: nothing after it`,
        );
      }),
      { numRuns: 200 },
    );
    assert.throws(() => c.copyOf(new Uint8Array(8), new Uint8Array(9)), `${c.by}: a page is copied whole`);
  }
  const overlapping = new Uint8Array(64);
  assert.throws(() => checksums[0]!.copyOf(overlapping.subarray(0, 32), overlapping.subarray(16, 48)), /overlap/);
});
