import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { GGML_DEQUANT_SHA256, randomBlocks } from '../../test/fixtures/ggml-dequant.js';
import { SeededRandom } from '../util/random.js';
import { QUANT_BLOCKS, type QuantizedDType, type WeightDType } from './gguf-types.js';
import { decodeWeights, encodeWeights } from './quant.js';
import { type MatrixRole, type ModelFileType, matrixType } from './quant-mix.js';
import { TEST_PRESETS, type TestPreset } from './test-model.js';

const QUANTIZED = Object.keys(QUANT_BLOCKS) as QuantizedDType[];

function sha256(values: Float32Array): string {
  return createHash('sha256')
    .update(new Uint8Array(values.buffer, values.byteOffset, values.byteLength))
    .digest('hex');
}

test("dequantization of random blocks is ggml's dequantize_row_*, bit for bit, for every block type", () => {
  for (const dtype of QUANTIZED) {
    const blocks = randomBlocks(dtype);
    const count = (blocks.length / QUANT_BLOCKS[dtype].bytes) * QUANT_BLOCKS[dtype].size;
    const out = new Float32Array(count);
    decodeWeights(blocks, dtype, 0, count, out);
    assert.equal(sha256(out), GGML_DEQUANT_SHA256[dtype], `${dtype}: f32 output differs from ggml's`);
    // a row in the middle decodes to the same values as the whole tensor
    const size = QUANT_BLOCKS[dtype].size;
    const part = new Float32Array(2 * size);
    decodeWeights(blocks, dtype, 7 * size, 2 * size, part);
    assert.deepEqual(part, out.subarray(7 * size, 9 * size), `${dtype}: blocks 7 and 8 alone`);
  }
});

test('the quantizers round each value to within its type’s step of the original', () => {
  // largest |error| relative to the largest |value| of the tensor: half a step of each format, plus the clamp of the
  // symmetric types (the value opposite the largest lands one step past the top level) and scale rounding (K-quants
  // store their sub-block scales in 4 to 8 bits). A quant stored in the wrong bits is off by a large part of the range.
  const bounds: Record<QuantizedDType, number> = {
    q4_0: 0.13,
    q4_1: 0.07,
    q5_0: 0.07,
    q5_1: 0.035,
    q8_0: 0.005,
    q2_k: 0.34,
    q3_k: 0.26,
    q4_k: 0.08,
    q5_k: 0.04,
    q6_k: 0.025,
  };
  const random = new SeededRandom(9);
  const values = Float32Array.from({ length: 16 * 256 }, (_, i) => random.normal() * (i % 7 === 0 ? 5 : 1));
  const amax = values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  for (const dtype of QUANTIZED) {
    const data = encodeWeights(values, dtype);
    assert.equal(data.byteLength, (values.length / QUANT_BLOCKS[dtype].size) * QUANT_BLOCKS[dtype].bytes, dtype);
    const back = new Float32Array(values.length);
    decodeWeights(data, dtype, 0, values.length, back);
    let worst = 0;
    for (let i = 0; i < values.length; i++) worst = Math.max(worst, Math.abs(back[i]! - values[i]!));
    assert.ok(worst / amax <= bounds[dtype], `${dtype}: error ${worst / amax} of the largest value`);
    assert.ok(worst / amax > bounds[dtype] / 20, `${dtype}: error ${worst / amax} is implausibly small`);
  }
});

/** Weight-type histogram of every matrix of a llama-style preset written as `fileType`. */
function typeMix(preset: TestPreset, fileType: ModelFileType): Record<string, number> {
  const p = TEST_PRESETS[preset];
  const shape = { layerCount: p.layerCount, gqa: p.headCount / p.kvHeadCount, tied: p.tied };
  const counts: Record<string, number> = {};
  const add = (role: MatrixRole, layer: number, rowLength: number) => {
    const t: WeightDType = matrixType(fileType, { role, layer, rowLength }, shape);
    counts[t] = (counts[t] ?? 0) + 1;
  };
  add('token_embd', 0, p.dim);
  if (!p.tied) add('output', 0, p.dim);
  for (let l = 0; l < p.layerCount; l++) {
    for (const role of ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up'] as const)
      add(role, l, p.dim);
    add('ffn_down', l, p.ffnDim);
  }
  return counts;
}

test("mixes pick llama-quantize's type for every matrix (histograms recorded from llama-quantize on the same shapes)", () => {
  // llama-quantize (llama.cpp at /work/llama/src) run on kvfence's f32 files of each shape; `--pure` for plain types
  assert.deepEqual(typeMix('135m', 'q4_k_m'), { q8_0: 15, q5_0: 166, q6_k: 14, q4_k: 16 });
  assert.deepEqual(typeMix('135m', 'q4_k_s'), { q8_0: 1, q5_0: 176, q5_1: 4, q5_k: 3, q4_k: 27 });
  assert.deepEqual(typeMix('135m', 'q5_k_m'), { q8_0: 15, q5_1: 166, q6_k: 14, q5_k: 16 });
  assert.deepEqual(typeMix('135m', 'q3_k_m'), { q8_0: 1, q4_0: 120, q5_0: 58, q5_1: 2, q5_k: 1, q4_k: 29 });
  assert.deepEqual(typeMix('135m', 'q3_k_l'), { q8_0: 1, q4_0: 120, q5_1: 60, q5_k: 30 });
  assert.deepEqual(typeMix('135m', 'q6_k'), { q8_0: 181, q6_k: 30 });
  assert.deepEqual(typeMix('135m', 'q2_k'), { q4_0: 181, q2_k: 30 });
  assert.deepEqual(typeMix('small', 'q4_k_m'), { q6_k: 3, q4_k: 13 });
  assert.deepEqual(typeMix('small', 'q4_k_s'), { q6_k: 1, q4_k: 13, q5_k: 2 });
  assert.deepEqual(typeMix('small', 'q3_k_m'), { q6_k: 1, q3_k: 9, q4_k: 4, q5_k: 2 });
  assert.deepEqual(typeMix('tiny', 'q3_k_m'), { q8_0: 1, q4_0: 9, q5_0: 4, q5_1: 2 });
  assert.deepEqual(typeMix('small', 'q5_1'), { q5_1: 16 });
});
