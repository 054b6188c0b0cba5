/**
 * The page checksum is XXH3 (64-bit) with seed 0 whoever computes it: the addon's gives hash-wasm's values on every
 * length (each short form: 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes; the long one's stripes, blocks and last stripe),
 * in each form of its long-input loop this CPU runs, and on pages that start at any offset of their buffer, and both
 * give the published values of the reference implementation. Copying a page while hashing it (the receiver's store
 * into its pool) writes every byte where it belongs, touches nothing around it, and returns the checksum of the page
 * alone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { loadAddon } from '../compute/native-backend.js';
import { createPageChecksum } from './page-checksum.js';

test('XXH3 by the addon, in each form, and by hash-wasm agree on every length and offset, and with the reference values', async () => {
  const addon = loadAddon(); // a missing or stale addon fails here with its reason
  const native = await createPageChecksum();
  const wasm = await createPageChecksum('wasm');
  assert.equal(native.by, 'native', 'the addon computes the checksum where it is built');
  assert.equal(wasm.by, 'wasm');
  assert.equal(addon.xxh3Isas.at(-1), 'portable');
  const forms = addon.xxh3Isas.map((isa) => ({ isa, of: (bytes: Uint8Array) => addon.xxh3(bytes, isa) }));
  for (const c of [native, wasm, ...forms]) {
    const who = 'isa' in c ? c.isa : c.by;
    assert.equal(c.of(new Uint8Array(0)), 0x2d06800538d394c2n, who);
    assert.equal(c.of(new TextEncoder().encode('abc')), 0x78af5f94892f3950n, who);
    // the reference implementation (xxHash 0.8's XXH3_64bits) on the byte pattern below, one length of each form
    for (const [n, value] of [
      [3, 0x974a8c6fa70c32a8n],
      [8, 0x3b3de57025bcabe0n],
      [16, 0x7d92c6d3e2a9b7e4n],
      [100, 0x29887a10a17492f3n],
      [200, 0xfb1ab93969c87d29n],
      [5000, 0x509e1dfe9d4cacedn],
    ] as const) {
      assert.equal(c.of(pattern(n)), value, `${who}, ${n} bytes`);
    }
  }
  for (let n = 0; n <= 2100; n++) {
    const bytes = pattern(n);
    const expected = wasm.of(bytes);
    for (const f of forms) assert.equal(f.of(bytes), expected, `${f.isa}, ${n} bytes`);
  }
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 5000, size: 'max' }), fc.nat(63), (bytes, offset) => {
      const shifted = new Uint8Array(offset + bytes.byteLength);
      shifted.set(bytes, offset);
      const page = shifted.subarray(offset);
      for (const f of forms) assert.equal(f.of(page), wasm.of(bytes), f.isa);
    }),
    { numRuns: 300, endOnFailure: true }, // shrinking arrays of thousands of bytes would take many minutes
  );
  const page = new Uint8Array(1 << 20).map((_, i) => (i * 2654435761) >>> 24);
  for (const f of forms) assert.equal(f.of(page), wasm.of(page), f.isa);
  assert.throws(() => addon.xxh3(page, 'no-such-form'), /does not run the XXH3 form/);
  assert.throws(() => addon.xxh3(page, 2 as unknown as string), /named by a string/);
  assert.throws(() => addon.xxh3(new Uint16Array(4) as unknown as Uint8Array), /Uint8Array/);
});

/** n bytes that differ at every position and with every length */
function pattern(n: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 131 + n) & 0xff);
}

test('copyOf stores the page whole, and nothing around it, and returns its XXH3, by either implementation and in each form', async () => {
  const addon = loadAddon();
  const native = await createPageChecksum();
  const wasm = await createPageChecksum('wasm');
  assert.equal(native.by, 'native', 'the addon copies where it is built');
  const copiers = [
    { who: 'native', copyOf: native.copyOf },
    { who: 'wasm', copyOf: wasm.copyOf },
    ...addon.xxh3Isas.map((isa) => ({
      who: isa,
      copyOf: (source: Uint8Array, destination: Uint8Array) => addon.xxh3Copy(source, destination, isa),
    })),
  ];
  // the page at `to` in a pool filled with a marker: it lands whole, with its checksum, and nothing else changes
  const check = (
    who: string,
    copyOf: (s: Uint8Array, d: Uint8Array) => bigint,
    bytes: Uint8Array,
    from: number,
    to: number,
  ) => {
    const source = new Uint8Array(from + bytes.byteLength);
    source.set(bytes, from);
    const pool = new Uint8Array(to + bytes.byteLength + 64).fill(0xa5);
    const page = pool.subarray(to, to + bytes.byteLength);
    assert.equal(copyOf(source.subarray(from), page), wasm.of(bytes), who);
    assert.deepEqual(page, bytes, `${who}: the page is stored whole`);
    assert.ok(
      pool.subarray(0, to).every((b) => b === 0xa5),
      `${who}: nothing before the page`,
    );
    assert.ok(
      pool.subarray(to + bytes.byteLength).every((b) => b === 0xa5),
      `${who}: nothing after it`,
    );
  };
  // large buffers are 16-byte aligned, so offsets 0 and 16 take the streamed stores and 8 the ordinary ones
  const page = new Uint8Array((1 << 20) + 100).map((_, i) => (i * 2654435761) >>> 24);
  for (const { who, copyOf } of copiers) {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 5000, size: 'max' }), fc.nat(63), fc.nat(63), (bytes, from, to) =>
        check(who, copyOf, bytes, from, to),
      ),
      { numRuns: 200, endOnFailure: true }, // shrinking arrays of thousands of bytes would take many minutes
    );
    for (const to of [0, 16, 8]) check(who, copyOf, page, 3, to);
    assert.throws(() => copyOf(new Uint8Array(8), new Uint8Array(9)), `${who}: a page is copied whole`);
  }
  const overlapping = new Uint8Array(64);
  assert.throws(() => native.copyOf(overlapping.subarray(0, 32), overlapping.subarray(16, 48)), /overlap/);
});
