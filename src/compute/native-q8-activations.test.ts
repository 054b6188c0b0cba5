/** Q8 activations (NativeBackendOptions.q8Activations; docs/native.md): the arithmetic as written, everywhere alike. */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { randomBlocks } from '../../test/fixtures/ggml-dequant.js';
import { assertSameBits, gaussian } from '../../test/helpers/backend-conformance.js';
import { prefillLogits, promptOf } from '../../test/helpers/forward-checks.js';
import { forwardFor, loadTestModel } from '../../test/helpers/models.js';
import { assertSameOnEveryIsa, nativeBackendForTest } from '../../test/helpers/native.js';
import { type Block32, isKQuant, q8Product, q8ProductK, quantizeRowQ8 } from '../../test/helpers/q8-activations.js';
import type { WeightMatrix } from '../model/weights.js';
import { widenedBytes, widenQ5_0Here } from '../model/widen-q5-0.js';
import { f16ToF32 } from '../util/half.js';
import { SeededRandom } from '../util/random.js';
import { loadAddon, NativeBackend } from './native-backend.js';
import { selectBackend } from './select-backend.js';

const IN = 512;
const IN_32 = 576; // the 32-value blocks' rows: 18 blocks, two groups of 8 and a partial one (Q4_1's, Q5_1's mins)
const OUT = 40; // not a multiple of any tile's outputs
const ROWS = 7;
const random = new SeededRandom(8);
type Q8Type = 'q8_0' | 'q5_0' | 'q4_0' | 'q4_1' | 'q5_1' | 'q2_k' | 'q3_k' | 'q4_k' | 'q5_k' | 'q6_k';
// random quants (Q8_0's −128 included), group scales and mins, and f16 scales from subnormal to 65,504
const randomWeights = (dtype: Q8Type, inDim = isKQuant(dtype) ? IN : IN_32): WeightMatrix => ({
  name: dtype,
  dtype,
  inDim,
  outDim: OUT,
  data: randomBlocks(dtype, (inDim / (isKQuant(dtype) ? 256 : 32)) * OUT, 3),
});
const weights = randomWeights('q8_0', IN);

/** Rows of x whose blocks cover the cases: ordinary, ties of the rounding, zeros, tiny, huge, and (row 6) infinity. */
function rowsOfX(IN: number): Float32Array {
  const x = gaussian(random, ROWS * IN);
  // row 1: a block whose d is exactly 1, with values halfway between integers
  x.set([127, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 126.5], IN + 32);
  x.fill(0, 2 * IN + 64, 2 * IN + 96); // row 2: a block of zeros
  for (let i = 3 * IN; i < 3 * IN + 32; i++) x[i] = x[i]! * 1e-41; // row 3: subnormal values, d rounds to 0 or near
  for (let i = 4 * IN + 32; i < 4 * IN + 64; i++) x[i] = x[i]! * 1e25; // row 4: huge values
  x[6 * IN + 100] = Number.POSITIVE_INFINITY; // row 6: every output NaN
  return x;
}
const xOf = new Map([IN, IN_32].map((inDim) => [inDim, rowsOfX(inDim)]));
const x = xOf.get(IN)!;

/** Every output of every row as the written-out arithmetic gives it (Q5_0 as the Q8_0 blocks it widens to). */
function expected(w: WeightMatrix): Float32Array {
  const data = w.data as Uint8Array;
  const { dtype, inDim } = w;
  const x = xOf.get(inDim)!;
  const q8 = dtype === 'q5_0' ? new Uint8Array(widenedBytes(data.length)) : data;
  if (dtype === 'q5_0') widenQ5_0Here(data, q8);
  const out = new Float32Array(ROWS * OUT);
  for (let r = 0; r < ROWS; r++) {
    const q = quantizeRowQ8(x.subarray(r * inDim, (r + 1) * inDim));
    for (let o = 0; o < OUT; o++)
      out[r * OUT + o] = isKQuant(dtype)
        ? q8ProductK(q, q8, dtype, inDim, o)
        : q8Product(q, q8, inDim, o, dtype === 'q5_0' ? 'q8_0' : (dtype as Block32));
  }
  return out;
}

/** Same bits, except that a NaN may be any NaN. */
function assertSameOrNaN(got: Float32Array, wanted: Float32Array, what: string): void {
  const nan = wanted.map((v) => (Number.isNaN(v) ? 1 : 0));
  assert.ok(nan.some((v) => v === 1) || wanted.length < ROWS * OUT, `${what}: row 6 must be NaN`);
  for (let i = 0; i < wanted.length; i++) {
    if (nan[i] === 1) assert.ok(Number.isNaN(got[i]), `${what}: element ${i} is ${got[i]}, expected NaN`);
  }
  assertSameBits(
    got.map((v, i) => (nan[i] === 1 ? 0 : v)),
    wanted.map((v, i) => (nan[i] === 1 ? 0 : v)),
    what,
  );
}

const plain = nativeBackendForTest();
after(() => plain.close());

test('Q8 activations: each product is the written-out arithmetic, bit for bit, on every instruction set, thread count and batch', () => {
  const types = ['q8_0', 'q5_0', 'q4_0', 'q4_1', 'q5_1', 'q2_k', 'q3_k', 'q4_k', 'q5_k', 'q6_k'] as const;
  for (const w of types.map((dtype) => randomWeights(dtype))) {
    const want = expected(w);
    const x = xOf.get(w.inDim)!;
    const IN = w.inDim;
    assert.ok(want.slice(6 * OUT).every(Number.isNaN));
    for (const threadCount of [1, 3]) {
      const backend = nativeBackendForTest({ threadCount, q8Activations: true });
      try {
        assert.equal(backend.q8Activations, true);
        for (const isa of backend.supportedIsas) {
          backend.useIsa(isa);
          const what = `${w.dtype}, ${isa}, ${threadCount} threads`;
          const out = new Float32Array(ROWS * OUT);
          backend.matmul(out, x, ROWS, w);
          assertSameOrNaN(out, want, `${what}, ${ROWS} rows`);
          // each row alone: the same bits as in the batch
          for (let r = 0; r < ROWS; r++) {
            const one = new Float32Array(OUT);
            backend.matmul(one, x.subarray(r * IN, (r + 1) * IN), 1, w);
            assertSameOrNaN(one, want.subarray(r * OUT, (r + 1) * OUT), `${what}, row ${r} alone`);
          }
        }
      } finally {
        backend.close();
      }
    }
  }
});

test('Q8 activations: within half a quantization step of the exact product; an F32 part of the same call unchanged', () => {
  const backend = nativeBackendForTest({ q8Activations: true });
  try {
    const rows = 4; // ordinary rows: 0, 1, 2, 3 (3 has a subnormal block)
    const view = new DataView(weights.data.buffer, weights.data.byteOffset, weights.data.byteLength);
    const bias = gaussian(random, OUT);
    const got = gaussian(random, rows * OUT);
    const residual = got.slice();
    const f32Weights: WeightMatrix = {
      name: 'f32',
      dtype: 'f32',
      inDim: IN,
      outDim: 8,
      data: gaussian(random, IN * 8),
    };
    const f32Out = new Float32Array(rows * 8);
    backend.matmuls(x.subarray(0, rows * IN), rows, [
      { out: got, w: weights, bias, accumulate: true },
      { out: f32Out, w: f32Weights },
    ]);
    for (let r = 0; r < rows; r++) {
      const { d } = quantizeRowQ8(x.subarray(r * IN, (r + 1) * IN));
      for (let o = 0; o < OUT; o++) {
        let exact = 0;
        let step = 0; // what rounding x to Q8 can move the product by: half a step of each x block, times |w|
        let magnitude = 0; // Σ |x·w|, which the f32 sums' rounding scales with
        for (let k = 0; k < IN; k++) {
          const at = (o * (IN / 32) + Math.floor(k / 32)) * 34;
          const w = f16ToF32(view.getUint16(at, true)) * view.getInt8(at + 2 + (k % 32));
          exact += x[r * IN + k]! * w;
          step += (Math.abs(w) * d[Math.floor(k / 32)]!) / 2;
          magnitude += Math.abs(x[r * IN + k]! * w);
        }
        const value = got[r * OUT + o]! - residual[r * OUT + o]! - bias[o]!;
        assert.ok(
          Math.abs(value - exact) <= step * 1.001 + 1e-5 * magnitude,
          `row ${r} output ${o}: ${value} against ${exact}, allowed ${step}`,
        );
      }
    }
    // the F32 part of the same call: x as given, the same bits as without Q8 activations
    const f32Want = new Float32Array(rows * 8);
    plain.matmul(f32Want, x.subarray(0, rows * IN), rows, f32Weights);
    assertSameBits(f32Out, f32Want, 'the F32 part');
  } finally {
    backend.close();
  }
});

test('Q8 activations: a Q5_0 model gives the same bits as stored and widened into Q8_0 blocks', () => {
  const options = { preset: 'small', arch: 'llama', dtype: 'q5_0', seed: 40 } as const;
  const stored = loadTestModel(options, { widenQ5_0: false });
  const widened = loadTestModel(options);
  assert.equal(stored.weights.layers[0]!.wq.dtype, 'q5_0');
  assert.equal(widened.weights.layers[0]!.wq.dtype, 'q8_0');
  const prompt = promptOf(stored, 40, 2);
  const q8 = nativeBackendForTest({ q8Activations: true });
  try {
    const want = prefillLogits(forwardFor(widened, 8, 16, q8), prompt, 40);
    assertSameOnEveryIsa(
      (backend) => prefillLogits(forwardFor(stored, 8, 16, backend), prompt, 40),
      want,
      'Q5_0 as stored',
      [1, 3],
      { q8Activations: true },
    );
  } finally {
    q8.close();
  }
});

// the mixes at this shape: Q3_K_M's Q3_K, Q4_K, Q5_K and Q6_K; Q2_K_S's Q2_K and Q6_K
for (const dtype of ['q8_0', 'q4_k_m', 'q3_k_m', 'q2_k_s'] as const)
  test(`Q8 activations through the forward pass (${dtype}): every instruction set and thread count, chunked prefill, the same bits`, () => {
    const model = loadTestModel({ preset: 'small', arch: 'llama', dtype, seed: 40 });
    const prompt = promptOf(model, 40, 2);
    const q8 = nativeBackendForTest({ q8Activations: true });
    try {
      const wanted = prefillLogits(forwardFor(model, 8, 16, q8), prompt, 40);
      for (const chunk of [40, 4, 7, 1])
        assertSameOnEveryIsa(
          (backend) => prefillLogits(forwardFor(model, 8, 16, backend), prompt, chunk),
          wanted,
          `chunks of ${chunk}`,
          [1, 3],
          { q8Activations: true },
        );
      // not the f32 products, but close to them
      const f32 = prefillLogits(forwardFor(model, 8, 16, plain), prompt, 40);
      const rms = (a: ArrayLike<number>) => Math.sqrt(Array.from(a).reduce((s, v) => s + v * v, 0) / a.length);
      const difference = rms(wanted.map((v, i) => v - f32[i]!));
      assert.ok(difference > 0, 'Q8 activations changed nothing');
      assert.ok(difference < 0.05 * rms(f32), `logits moved by ${difference} (rms ${rms(f32)})`);
    } finally {
      q8.close();
    }
  });

test('Q8 activations need the native kernels: the reference backend refuses them, the addon checks the option', () => {
  assert.throws(() => selectBackend('reference', () => {}, { q8Activations: true }), /need the native backend/);
  // where they run, the start-up lines say so; without them, nothing
  for (const q8Activations of [true, false]) {
    const lines: string[] = [];
    const backend = selectBackend('native', (line) => lines.push(line), { q8Activations });
    assert.ok(backend instanceof NativeBackend);
    backend.close();
    assert.equal(
      lines.some((line) => /on Q8 activations \(--q8-activations\)/.test(line)),
      q8Activations,
    );
  }
  const addon = loadAddon();
  assert.throws(() => new addon.Context(1, 'yes' as unknown as boolean), /q8Activations must be a boolean/);
  assert.equal(new addon.Context(1).q8Activations, false);
});
