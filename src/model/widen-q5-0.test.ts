import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { randomBlocks } from '../../test/fixtures/ggml-dequant.js';
import { tempDirectory } from '../../test/helpers/temp.js';
import { loadAddon } from '../compute/native-backend.js';
import { readGguf } from './gguf-read.js';
import { type GgufMetadata, QUANT_BLOCKS } from './gguf-types.js';
import { writeGguf } from './gguf-write.js';
import { decodeWeights } from './quant.js';
import { widenedBytes, widenQ5_0, widenQ5_0Here } from './widen-q5-0.js';

const Q5 = QUANT_BLOCKS.q5_0.bytes;
const META: GgufMetadata = new Map([['general.architecture', { type: 'string', value: 'llama' }]]);

function widened(q5: Uint8Array, widen = widenQ5_0Here): Uint8Array {
  const q8 = new Uint8Array(widenedBytes(q5.length));
  widen(q5, q8);
  return q8;
}

/** The values of `data` as `dtype`, as f32 bit patterns (so that NaNs and the signs of zeros compare too). */
function bitsOf(data: Uint8Array, dtype: 'q5_0' | 'q8_0'): Uint32Array {
  const values = (data.length / QUANT_BLOCKS[dtype].bytes) * 32;
  const out = new Float32Array(values);
  decodeWeights(data, dtype, 0, values, out);
  return new Uint32Array(out.buffer);
}

test('widened Q5_0 blocks are Q8_0 blocks of the same values, bit for bit, whatever the scale', () => {
  const q5 = randomBlocks('q5_0');
  // the random blocks keep their scales finite: give a few of them zeros of both signs, infinities and a NaN
  const view = new DataView(q5.buffer);
  [0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e01, 0x0001, 0x8001, 0x7bff].forEach((scale, b) => {
    view.setUint16(b * Q5, scale, true);
  });
  assert.deepEqual(bitsOf(widened(q5), 'q8_0'), bitsOf(q5, 'q5_0'));
});

test('a GGUF read with widening keeps Q5_0 tensors as Q8_0 blocks (through the staging buffer, in pieces), the rest as stored', () => {
  const dir = tempDirectory();
  const path = join(dir, 'widen.gguf');
  // 70,000 blocks: more than one staging piece of 65,536
  const big = randomBlocks('q5_0', 70_000, 7);
  const small = randomBlocks('q5_0', 6, 8);
  const q8 = randomBlocks('q8_0', 4, 9);
  writeGguf(path, META, [
    { name: 'big', dtype: 'q5_0', dims: [32 * 7, 10_000], data: big },
    { name: 'f32', dtype: 'f32', dims: [3], data: Float32Array.of(1, 2, 3) },
    { name: 'small', dtype: 'q5_0', dims: [64, 3], data: small },
    { name: 'q8', dtype: 'q8_0', dims: [32, 4], data: q8 },
  ]);
  const stored = readGguf(path);
  const file = readGguf(path, { widenQ5_0: true });
  const bytesOf = (name: string) => {
    const t = file.tensors.get(name)!;
    return { dtype: t.dtype, bytes: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) };
  };
  assert.deepEqual(bytesOf('big'), { dtype: 'q8_0', bytes: widened(big) });
  assert.deepEqual(bytesOf('small'), { dtype: 'q8_0', bytes: widened(small) });
  assert.deepEqual(bytesOf('q8'), { dtype: 'q8_0', bytes: q8 });
  assert.deepEqual([...(file.tensors.get('f32')!.data as Float32Array)], [1, 2, 3]);
  const added = 70_006 * (QUANT_BLOCKS.q8_0.bytes - Q5);
  assert.deepEqual(file.widened, { tensors: 2, addedBytes: added });
  // the arena grows by what widening added, give or take each widened tensor's alignment padding
  assert.ok(Math.abs(file.arenaBytes - stored.arenaBytes - added) < 2 * 64);
  assert.deepEqual(stored.widened, { tensors: 0, addedBytes: 0 });
  assert.equal(stored.tensors.get('big')!.dtype, 'q5_0');
});

test("the addon's widening writes the JavaScript loop's bytes, and refuses what is not whole blocks or overlaps", () => {
  const addon = loadAddon();
  for (const seed of [1, 2, 3]) {
    const q5 = randomBlocks('q5_0', 1000, seed);
    assert.deepEqual(widened(q5, addon.widenQ5_0), widened(q5));
  }
  assert.deepEqual(widened(new Uint8Array(0), addon.widenQ5_0), new Uint8Array(0));
  assert.throws(() => addon.widenQ5_0(new Uint8Array(Q5 + 1), new Uint8Array(34)), /not whole Q5_0 blocks/);
  assert.throws(() => addon.widenQ5_0(new Uint8Array(2 * Q5), new Uint8Array(34)), /does not fit/);
  const shared = new Uint8Array(200);
  assert.throws(() => addon.widenQ5_0(shared.subarray(0, Q5), shared.subarray(10, 44)), /overlap/);
  // the loader goes through the addon where it loads
  const q5 = randomBlocks('q5_0', 10, 4);
  assert.deepEqual(widened(q5, widenQ5_0), widened(q5));
});
