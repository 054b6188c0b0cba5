// A model config from GGUF metadata: what llama.cpp reads, and the values that cannot run refused at load.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { GgufMetadata, GgufValue } from './gguf-types.js';
import { modelConfigFromGguf } from './model-config.js';
import { makeTestModel } from './test-model.js';

/** The tiny test model's metadata for `arch` with `changes` (key without the architecture prefix → value). */
function metadataWith(arch: 'qwen2' | 'gemma3', changes: Record<string, GgufValue>): GgufMetadata {
  const metadata = new Map(makeTestModel({ preset: 'tiny', arch, dtype: 'f32', seed: 3 }).metadata);
  for (const [key, value] of Object.entries(changes)) metadata.set(`${arch}.${key}`, value);
  return metadata;
}

const f32 = (value: number): GgufValue => ({ type: 'f32', value });
const i32 = (value: number): GgufValue => ({ type: 'i32', value });

test('config values that ran as garbage or crashed the native backend are refused at load, naming the value', () => {
  const cases: ['qwen2' | 'gemma3', Record<string, GgufValue>, RegExp][] = [
    ['qwen2', { 'rope.dimension_count': i32(-2) }, /rope dimension -2 is not an even count from 0 to .* 16/],
    ['qwen2', { 'rope.dimension_count': i32(3) }, /rope dimension 3 /],
    ['qwen2', { 'rope.dimension_count': i32(18) }, /rope dimension 18 /],
    ['qwen2', { 'attention.layer_norm_rms_epsilon': f32(Infinity) }, /normEps .* is Infinity, expected a number/],
    // finite as a double, not as the kernels' f32: every logit came out 0
    ['qwen2', { 'attention.layer_norm_rms_epsilon': { type: 'f64', value: 1e300 } }, /normEps .* is 1e\+300, .*f32/],
    ['qwen2', { 'rope.freq_base': f32(Infinity) }, /ropeTheta \(rope\.freq_base\) is Infinity/],
    ['qwen2', { 'rope.scaling.attn_factor': f32(Infinity) }, /ropeAttnFactor .* is Infinity/],
    ['qwen2', { 'rope.scaling.factor': f32(1e-45) }, /ropeFreqScale \(1 \/ rope\.scaling\.factor\) is Infinity/],
    ['gemma3', { 'rope.freq_base_swa': f32(Number.NaN) }, /ropeThetaSliding .* is NaN/],
    ['gemma3', { final_logit_softcapping: f32(Infinity) }, /final_logit_softcapping is Infinity/],
    ['gemma3', { 'attention.sliding_window_pattern': i32(-1) }, /sliding_window_pattern is -1/],
  ];
  for (const [arch, changes, pattern] of cases) {
    assert.throws(
      () => modelConfigFromGguf(metadataWith(arch, changes), 'm.gguf'),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_model_file' && pattern.test(e.message),
      JSON.stringify(changes),
    );
  }
});

test('no rotation (rope.dimension_count 0) loads', () => {
  const config = modelConfigFromGguf(metadataWith('qwen2', { 'rope.dimension_count': i32(0) }), 'm.gguf');
  assert.equal(config.ropeDim, 0);
});

test('a head larger than the native kernels take is an unsupported model at load, not a 500 on every request', () => {
  const head = { type: 'u32', value: 2 * LIMITS.headDimMax } as const;
  const metadata = metadataWith('qwen2', { 'attention.key_length': head, 'attention.value_length': head });
  assert.throws(
    () => modelConfigFromGguf(metadata, 'm.gguf'),
    (e: unknown) =>
      e instanceof KvfenceError &&
      e.code === 'unsupported_model' &&
      e.message === 'm.gguf: head size 2048 exceeds the 1024 kvfence supports (LIMITS.headDimMax)',
  );
});

test('a sliding-window pattern as a flag a layer (newer converters) reads as its period does; a wrong count is refused', () => {
  const layers = modelConfigFromGguf(metadataWith('gemma3', {}), 'm.gguf').slidingLayers;
  assert.ok(layers.includes(true) && layers.includes(false), 'the tiny gemma3 (period 2) has both kinds of layer');
  const flags = (value: boolean[]): GgufValue => ({ type: 'array', itemType: 'bool', value });
  const asFlags = metadataWith('gemma3', {
    'attention.sliding_window_pattern': flags(layers.map((_, l) => l % 2 < 1)),
  });
  assert.deepEqual(modelConfigFromGguf(asFlags, 'm.gguf').slidingLayers, layers);
  const uneven = layers.map((_, l) => l === layers.length - 1);
  const custom = metadataWith('gemma3', { 'attention.sliding_window_pattern': flags(uneven) });
  assert.deepEqual(modelConfigFromGguf(custom, 'm.gguf').slidingLayers, uneven);
  const short = metadataWith('gemma3', { 'attention.sliding_window_pattern': flags([true]) });
  assert.throws(() => modelConfigFromGguf(short, 'm.gguf'), /sliding_window_pattern has 1 flags for \d+ layers/);
});
