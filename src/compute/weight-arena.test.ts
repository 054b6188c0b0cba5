import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { loadTestModel } from '../../test/helpers/models.js';
import { loadAddon } from './native-backend.js';
import { allocateWeightArena, thpUsable } from './weight-arena.js';

const MIB = 2 ** 20;
const ROLLUP = '/proc/self/smaps_rollup';
/** a first touch of advised memory gets 2 MiB pages, and the kernel reports the process's huge pages */
const thpOn = thpUsable() && existsSync(ROLLUP);

function anonHugeBytes(): number {
  const kib = /AnonHugePages:\s+(\d+) kB/.exec(readFileSync(ROLLUP, 'utf8'))?.[1];
  return Number(kib) * 1024;
}

test('the addon advises exactly the 2 MiB-aligned interior of a buffer, and nothing in one too small to hold a huge page', () => {
  const addon = loadAddon();
  const advised = addon.adviseHugePages(new ArrayBuffer(16 * MIB));
  // whole 2 MiB pages inside the buffer; on 4 KiB-aligned memory a 16 MiB buffer holds 7 or 8 of them, all advised
  // where the kernel has THP (a kernel without it refuses the advice: 0)
  assert.ok(advised % (2 * MIB) === 0 && advised <= 16 * MIB, `advised ${advised} bytes`);
  if (thpUsable()) assert.ok(advised >= 14 * MIB, `advised ${advised} bytes`);
  assert.equal(addon.adviseHugePages(new ArrayBuffer(MIB)), 0);
  assert.throws(() => (addon.adviseHugePages as (x: unknown) => number)(new Uint8Array(8)), TypeError);
});

test('a weight arena is advised before its first touch, so touching it faults in huge pages', {
  skip: !thpOn && 'THP off',
}, () => {
  loadAddon(); // a missing or stale addon fails here with its reason, not below as "advised 0 bytes"
  const before = anonHugeBytes();
  const arena = allocateWeightArena(64 * MIB);
  assert.ok(arena.hugePageBytes >= 62 * MIB, `advised ${arena.hugePageBytes} bytes`);
  new Uint8Array(arena.buffer).fill(1);
  const gained = anonHugeBytes() - before;
  // the kernel may fall back to small pages when it has no free 2 MiB block: ask for most, not all
  assert.ok(gained >= arena.hugePageBytes / 2, `${gained / MIB} MiB of huge pages after touching 64 MiB`);
});

test('a loaded model says how big its weight arena is and how much of it was advised', () => {
  const model = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'q8_0', seed: 12 });
  let sum = 0;
  for (const w of [model.weights.tokenEmbedding, ...model.weights.layers.flatMap((l) => [l.wq, l.wDown])]) {
    assert.equal(w.data.buffer.byteLength, model.arena.bytes, `${w.name} lives in the arena`);
    sum += w.data.byteLength;
  }
  assert.ok(sum <= model.arena.bytes);
  assert.ok(model.arena.hugePageBytes <= model.arena.bytes && model.arena.hugePageBytes % (2 * MIB) === 0);
});
