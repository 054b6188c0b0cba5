import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, test } from 'node:test';
import { GGML_DEQUANT_SHA256, randomBlocks } from '../../test/fixtures/ggml-dequant.js';
import { assertSameBits, gaussian } from '../../test/helpers/backend-conformance.js';
import { prefillLogits, promptOf } from '../../test/helpers/forward-checks.js';
import { forwardFor, loadTestModel } from '../../test/helpers/models.js';
import { assertSameOnEveryIsa, nativeBackendForTest } from '../../test/helpers/native.js';
import { QUANT_BLOCKS, type QuantizedDType } from '../model/gguf-types.js';
import { widenedBytes, widenQ5_0 } from '../model/widen-q5-0.js';
import { SeededRandom } from '../util/random.js';

const native = nativeBackendForTest();
after(() => native.close());
const QUANTIZED = Object.keys(QUANT_BLOCKS) as QuantizedDType[];

test("native embed of random blocks is ggml's dequantization, bit for bit, on every instruction set", () => {
  for (const isa of native.supportedIsas) {
    native.useIsa(isa);
    for (const dtype of QUANTIZED) {
      const { size, bytes } = QUANT_BLOCKS[dtype];
      const data = randomBlocks(dtype);
      // rows of 512 values (2 blocks of 256 or 16 of 32), the random tensor's blocks in order
      const inDim = 512;
      const outDim = (data.length / bytes) * (size / inDim);
      const tokens = Int32Array.from({ length: outDim }, (_, i) => i);
      const out = new Float32Array(outDim * inDim);
      native.embed(out, tokens, { name: dtype, dtype, inDim, outDim, data });
      const hash = createHash('sha256').update(new Uint8Array(out.buffer)).digest('hex');
      assert.equal(hash, GGML_DEQUANT_SHA256[dtype], `${isa} ${dtype}`);
    }
  }
  native.useIsa(native.supportedIsas[0]!);
});

test('every block type: each instruction set and thread count gives the same logits, and chunked prefill the same bits', () => {
  for (const dtype of QUANTIZED) {
    // Q5_0 as stored, so that its own tile runs (loading widens it into Q8_0 blocks by default: the test below)
    const model = loadTestModel({ preset: 'small', arch: 'llama', dtype, seed: 40 }, { widenQ5_0: false });
    const prompt = promptOf(model, 40, 2);
    const want = prefillLogits(forwardFor(model, 8, 16, native), prompt, 40);
    // 40 rows go through the dequantized copy; chunks of 4 and 7 through the wide tile where the instruction set has
    // one (AVX-512: 4 rows, and Q8_0's 7; AVX2: both), the plain tile or the copy elsewhere
    for (const chunk of [40, 4, 7])
      assertSameOnEveryIsa(
        (backend) => prefillLogits(forwardFor(model, 8, 16, backend), prompt, chunk),
        want,
        `${dtype} chunks of ${chunk}`,
      );
  }
});

test("Q5_0 weights widened at load into Q8_0 blocks give the same bits: ggml's dequantization, and every logit", () => {
  const blocks = randomBlocks('q5_0');
  const q8 = new Uint8Array(widenedBytes(blocks.length));
  widenQ5_0(blocks, q8);
  const outDim = blocks.length / QUANT_BLOCKS.q5_0.bytes / 16;
  const out = new Float32Array(outDim * 512);
  native.embed(
    out,
    Int32Array.from({ length: outDim }, (_, i) => i),
    {
      name: 'widened',
      dtype: 'q8_0',
      inDim: 512,
      outDim,
      data: q8,
    },
  );
  assert.equal(createHash('sha256').update(new Uint8Array(out.buffer)).digest('hex'), GGML_DEQUANT_SHA256.q5_0);

  const options = { preset: 'small', arch: 'llama', dtype: 'q5_0', seed: 40 } as const;
  const stored = loadTestModel(options, { widenQ5_0: false });
  const widened = loadTestModel(options);
  assert.equal(stored.weights.layers[0]!.wq.dtype, 'q5_0');
  assert.equal(widened.weights.layers[0]!.wq.dtype, 'q8_0');
  assert.ok(widened.arena.widened.tensors > 0 && widened.arena.widened.addedBytes > 0);
  const prompt = promptOf(stored, 40, 2);
  const want = prefillLogits(forwardFor(stored, 8, 16, native), prompt, 40);
  assertSameBits(
    prefillLogits(forwardFor(widened, 8, 16), prompt, 40),
    prefillLogits(forwardFor(stored, 8, 16), prompt, 40),
    'reference',
  );
  for (const chunk of [40, 1])
    assertSameOnEveryIsa(
      (backend) => prefillLogits(forwardFor(widened, 8, 16, backend), prompt, chunk),
      want,
      `widened, chunks of ${chunk}`,
    );
});

test('the glue refuses rows of partial blocks and data of the wrong size for the block types', () => {
  const random = new SeededRandom(3);
  const x = gaussian(random, 256);
  const before = native.callCounts.matmul;
  const q4k = { name: 'w', dtype: 'q4_k' as const, inDim: 128, outDim: 2, data: new Uint8Array(144) };
  assert.throws(() => native.matmul(new Float32Array(4), x, 2, q4k), /whole blocks of 256 values/);
  const q5 = { name: 'w', dtype: 'q5_1' as const, inDim: 256, outDim: 1, data: new Uint8Array(8 * 24 - 1) };
  assert.throws(
    () => native.matmul(new Float32Array(1), x, 1, q5),
    /weight data has 191 elements, the shape needs 192/,
  );
  assert.equal(native.callCounts.matmul, before, 'no rejected call reached a kernel');
});
