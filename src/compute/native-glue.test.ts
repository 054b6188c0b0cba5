// The addon's glue trusts nothing: an index array that shares memory with an output is read as it was checked (a copy),
// a shape whose product would overflow is refused, and JavaScript that runs while the arguments are read (a getter on
// matmuls' parts) cannot free a buffer the kernels then use. Each case read or wrote outside the buffers it was given.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadAddon } from './native-backend.js';

const context = () => new (loadAddon().Context)(1);
const F32_TYPE = 0;

test('storeKv: page tables inside the arena are read as checked; nothing is written outside the arena', () => {
  const c = context();
  const [layerCount, pageSize, kvDim] = [1, 1, 16];
  const valuesPerPage = layerCount * 2 * pageSize * kvDim;
  const memory = new ArrayBuffer(256);
  const arena = new Uint16Array(memory, 0, 2 * valuesPerPage); // pages 0 and 1
  const outside = new Uint16Array(memory, 192, 32); // after the arena, in the same buffer
  const pageTables = new Int32Array(memory, 64, 2); // inside page 1's K row
  pageTables.set([1, 0]);
  const k = new Float32Array(2 * kvDim);
  const v = new Float32Array(2 * kvDim);
  k[2] = 3 * 2 ** -24; // row 0's store writes f16 bits 3 over pageTables[1]: row 1 would go to page 3
  k.fill(7, kvDim);
  v.fill(9, kvDim);
  const starts = new Int32Array([0, 1]);
  c.storeKv(k, v, 2, new Int32Array([0, 0]), pageTables, starts, 0, layerCount, pageSize, kvDim, valuesPerPage, arena);
  assert.deepEqual([...outside], new Array(32).fill(0), 'nothing past the arena');
  assert.equal(arena[0], 0x4700, 'row 1 went to page 0, as its checked page table said (7 in f16)');
  c.close();
});

test('embed: token ids inside the output are read as checked; no weight row past the matrix is read', () => {
  const c = context();
  const [inDim, outDim] = [16, 4];
  const memory = new ArrayBuffer(64 * inDim * 4);
  const w = new Float32Array(memory, 0, outDim * inDim).fill(1);
  new Float32Array(memory, 5 * inDim * 4, inDim).fill(42); // row 5: not the matrix's
  w.fill(new Float32Array(new Int32Array([5]).buffer)[0]!, 0, inDim); // row 0's values are the bits of 5
  const shared = new ArrayBuffer(2 * inDim * 4);
  const out = new Float32Array(shared);
  const tokens = new Int32Array(shared, 8 * 4, 2); // inside out's row 0
  tokens.set([0, 1]);
  c.embed(out, tokens, w, F32_TYPE, inDim, outDim);
  assert.deepEqual([...out.subarray(inDim)], new Array(inDim).fill(1), 'row 1 is weight row 1');
  c.close();
});

test('rope: a row width whose product with the row count would overflow is refused', () => {
  const c = context();
  assert.throws(
    () =>
      c.rope(
        new Float32Array(16),
        2 ** 24,
        2 ** 16,
        2 ** 24,
        2,
        new Int32Array(2 ** 24),
        new Float64Array([0, 1]),
        1,
        0,
      ),
    RangeError,
  );
  c.close();
});

test('matmuls: a getter on parts runs before any buffer is taken, so detaching them refuses the call', () => {
  const c = context();
  const [inDim, outDim, rowCount] = [32, 32, 4];
  const x = new Float32Array(rowCount * inDim).fill(1);
  const out0 = new Float32Array(rowCount * outDim);
  const out1 = new Float32Array(rowCount * outDim);
  const w = new Float32Array(inDim * outDim).fill(1);
  const parts: unknown[] = [out0, w, F32_TYPE, outDim, null, 0, out1, w.slice(), F32_TYPE, outDim, null, 0];
  Object.defineProperty(parts, 6, {
    get() {
      structuredClone(x.buffer, { transfer: [x.buffer] }); // detaches x and part 0's out
      structuredClone(out0.buffer, { transfer: [out0.buffer] });
      return out1;
    },
  });
  assert.throws(() => c.matmuls(x, rowCount, inDim, parts), RangeError);
  c.close();
});
