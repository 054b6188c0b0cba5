/**
 * Per-page checksum: XXH3 (64-bit) with seed 0, so a page costs far less to check than to move. It guards against
 * corruption between the pools (a bug, a bad copy, a bad buffer), not against an attacker: the secure channel's MAC
 * does that. Computed by the native addon where it is built (native/src/xxh3.cc: it reads the page where it lies,
 * 36.6-43 GB/s a core in cache on a machine where XXH64 ran 10.6, docs/protocol.md §8), else by hash-wasm's
 * xxhash3; the same values either way (page-checksum.test.ts), so the two sides of a transfer need not agree on
 * which. Loading the WebAssembly module is async, so a checksum is made once at startup and passed to whoever needs
 * it (no module-global state).
 */
import { createXXHash3 } from 'hash-wasm';
import { sharedAddon } from '../compute/native-backend.js';
import { assert } from '../util/assert.js';

export interface PageChecksum {
  readonly name: string;
  /** which implementation computes it */
  readonly by: 'native' | 'wasm';
  of(bytes: Uint8Array): bigint;
  /**
   * Copies `source` into `destination` (the same length) and returns the checksum of the bytes as written there: one
   * pass over the page where the addon computes it, a copy and then a hash of the copy otherwise.
   */
  copyOf(source: Uint8Array, destination: Uint8Array): bigint;
}

/** XXH3 by the addon where it loads, else by hash-wasm; `by` forces one (tests, the bench). */
export async function createPageChecksum(by?: PageChecksum['by']): Promise<PageChecksum> {
  const addon = by === 'wasm' ? null : sharedAddon();
  if (addon !== null) {
    return {
      name: 'xxh3',
      by: 'native',
      of: (bytes) => addon.xxh3(bytes),
      copyOf: (source, destination) => addon.xxh3Copy(source, destination),
    };
  }
  if (by === 'native') throw new Error('the native checksum needs the native addon (npm run build:native)');
  const hasher = await createXXHash3(0, 0);
  const of = (bytes: Uint8Array): bigint => {
    hasher.init();
    hasher.update(bytes);
    const digest = hasher.digest('binary'); // the 64-bit value, big-endian
    return new DataView(digest.buffer, digest.byteOffset, digest.byteLength).getBigUint64(0, false);
  };
  return {
    name: 'xxh3',
    by: 'wasm',
    of,
    copyOf: (source, destination) => {
      assert(source.byteLength === destination.byteLength, 'a page is copied whole');
      destination.set(source);
      return of(destination);
    },
  };
}
