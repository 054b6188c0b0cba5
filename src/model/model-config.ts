/**
 * Model hyperparameters from GGUF metadata, validated once. Follows llama.cpp's key names (`{arch}.embedding_length`,
 * ...) and its RoPE conventions: `llama` rotates adjacent pairs (x[2i], x[2i+1]); the others rotate halves (NEOX).
 * Per-architecture choices (llama.cpp's src/models/*.cpp): qwen3 and gemma3 RMS-normalize each head of Q and K;
 * gemma3 scales the embedding by √dim, norms after attention and FFN too, gates with GELU, and alternates
 * sliding-window layers (their own RoPE base) with global ones; phi3 stores fused QKV and gate/up (split at load).
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { type GgufMetadata, metaNumber, metaString, metaStringArray } from './gguf-types.js';

export const ARCHITECTURES = ['llama', 'qwen2', 'qwen3', 'gemma3', 'phi3'] as const;
export type Architecture = (typeof ARCHITECTURES)[number];
export type RopeStyle = 'adjacent' | 'neox';
export type FfnActivation = 'silu' | 'gelu';
/** What llama.cpp's `{arch}.rope.scaling.type` may say; yarn is refused at load (its ramp is not implemented). */
const ROPE_SCALING_TYPES = ['none', 'linear', 'longrope'] as const;
/** llama.cpp's default sliding-window period for gemma3 (every 6th layer global) and its default SWA RoPE base. */
const GEMMA3_SWA_PERIOD = 6;

/**
 * Which layers attend within the sliding window, from the key's two forms in llama.cpp: a period (set_swa_pattern:
 * every period-th layer, the last of each group, is global; 0: every layer slides), or a flag a layer (what newer
 * converters write from a Hugging Face config's `layer_types`). Without the key, gemma3's period of 6.
 */
function slidingLayers(meta: GgufMetadata, key: string, layerCount: number, path: string): boolean[] {
  const value = meta.get(key);
  if (value?.type === 'array' && value.itemType === 'bool') {
    if (value.value.length !== layerCount)
      throw new KvfenceError(
        'invalid_model_file',
        `${path}: ${key} has ${value.value.length} flags for ${layerCount} layers`,
      );
    return value.value;
  }
  const period = metaNumber(meta, key) ?? GEMMA3_SWA_PERIOD;
  if (!Number.isInteger(period) || period < 0)
    throw new KvfenceError('invalid_model_file', `${path}: ${key} is ${period}, expected a non-negative integer`);
  return Array.from({ length: layerCount }, (_, l) => period === 0 || l % period < period - 1);
}
const SWA_ROPE_BASE_DEFAULT = 10_000;

export interface ModelConfig {
  arch: Architecture;
  name: string;
  dim: number;
  layerCount: number;
  headCount: number;
  kvHeadCount: number;
  headDim: number;
  ffnDim: number;
  vocabSize: number;
  /** the context length the model file declares; what a server advertises must still be proven against its KV pool */
  contextLength: number;
  normEps: number;
  ropeTheta: number;
  ropeStyle: RopeStyle;
  /** llama.cpp `{arch}.rope.dimension_count`: how many leading dims of each head are rotated */
  ropeDim: number;
  /** the angle of pair i at pos is pos · ropeFreqScale · base^(-2i/ropeDim) / factor_i (1 / rope.scaling.factor) */
  ropeFreqScale: number;
  /** cos and sin are multiplied by this (rope.scaling.attn_factor; phi3's long-context models set it) */
  ropeAttnFactor: number;
  /** phi3: the long RoPE factors apply when the context exceeds this (rope.scaling.original_context_length) */
  ropeOriginalContext: number;
  /** positions a sliding-window layer sees, itself included (0: no sliding-window layers) */
  slidingWindow: number;
  /** per layer: does it attend over the sliding window only (and rotate with ropeThetaSliding, unscaled)? */
  slidingLayers: readonly boolean[];
  ropeThetaSliding: number;
  /** the token embedding is multiplied by this (gemma3: √dim) */
  embeddingScale: number;
  /** q·k is multiplied by this before the softmax (1/√headDim except gemma3 27B) */
  attentionScale: number;
  ffnActivation: FfnActivation;
  /** logits = c · tanh(logits / c) when c > 0 (gemma's final_logit_softcapping) */
  finalLogitSoftcap: number;
}

function isArchitecture(name: string): name is Architecture {
  return (ARCHITECTURES as readonly string[]).includes(name);
}

export function modelConfigFromGguf(meta: GgufMetadata, path: string): ModelConfig {
  const arch = metaString(meta, 'general.architecture');
  if (arch === undefined) throw new KvfenceError('invalid_model_file', `${path}: general.architecture is missing`);
  if (!isArchitecture(arch)) {
    throw new KvfenceError(
      'unsupported_model',
      `${path}: architecture "${arch}" is not supported (supported: ${ARCHITECTURES.join(', ')})`,
    );
  }
  const need = (key: string): number => {
    const v = metaNumber(meta, `${arch}.${key}`);
    if (v === undefined) throw new KvfenceError('invalid_model_file', `${path}: ${arch}.${key} is missing`);
    return v;
  };
  const dim = need('embedding_length');
  const headCount = need('attention.head_count');
  const kvHeadCount = metaNumber(meta, `${arch}.attention.head_count_kv`) ?? headCount;
  const headDim = metaNumber(meta, `${arch}.attention.key_length`) ?? dim / headCount;
  const valueDim = metaNumber(meta, `${arch}.attention.value_length`) ?? dim / headCount;
  if (valueDim !== headDim) {
    throw new KvfenceError(
      'unsupported_model',
      `${path}: key length ${headDim} differs from value length ${valueDim} (one head size is supported)`,
    );
  }
  const layerCount = need('block_count');
  // checked before anything is sized by it (a fuzzed header with 3e9 layers exhausted the heap here)
  if (!Number.isInteger(layerCount) || layerCount < 1 || layerCount > LIMITS.layerCountMax)
    throw new KvfenceError('invalid_model_file', `${path}: ${layerCount} layers`);
  const contextLength = need('context_length');
  const ropeTheta = metaNumber(meta, `${arch}.rope.freq_base`) ?? 10000;
  const swa = arch === 'gemma3' ? (metaNumber(meta, `${arch}.attention.sliding_window`) ?? 0) : 0;
  const vocabSize =
    metaNumber(meta, `${arch}.vocab_size`) ?? metaStringArray(meta, 'tokenizer.ggml.tokens')?.length ?? 0;
  const config: ModelConfig = {
    arch,
    name: metaString(meta, 'general.name') ?? arch,
    dim,
    layerCount,
    headCount,
    kvHeadCount,
    headDim,
    ffnDim: need('feed_forward_length'),
    vocabSize,
    contextLength,
    normEps: metaNumber(meta, `${arch}.attention.layer_norm_rms_epsilon`) ?? 1e-6,
    ropeTheta,
    ropeStyle: arch === 'llama' ? 'adjacent' : 'neox',
    ropeDim: metaNumber(meta, `${arch}.rope.dimension_count`) ?? headDim,
    ...ropeScaling(meta, arch, path),
    ropeOriginalContext: metaNumber(meta, `${arch}.rope.scaling.original_context_length`) ?? contextLength,
    slidingWindow: swa,
    slidingLayers: slidingLayers(meta, `${arch}.attention.sliding_window_pattern`, layerCount, path).map(
      (sliding) => swa > 0 && sliding,
    ),
    ropeThetaSliding: metaNumber(meta, `${arch}.rope.freq_base_swa`) ?? SWA_ROPE_BASE_DEFAULT,
    embeddingScale: arch === 'gemma3' ? Math.fround(Math.sqrt(dim)) : 1,
    // gemma_pytorch: the 27B model (62 layers) scales by its query width per head, the others by the head size
    attentionScale: 1 / Math.sqrt(arch === 'gemma3' && layerCount === 62 ? dim / headCount : headDim),
    ffnActivation: arch === 'gemma3' ? 'gelu' : 'silu',
    finalLogitSoftcap: arch === 'gemma3' ? (metaNumber(meta, `${arch}.final_logit_softcapping`) ?? 0) : 0,
  };
  validate(config, path);
  return config;
}

/** llama.cpp's RoPE scaling keys: type (default linear), factor (or the older scale_linear), attention factor. */
function ropeScaling(
  meta: GgufMetadata,
  arch: Architecture,
  path: string,
): Pick<ModelConfig, 'ropeFreqScale' | 'ropeAttnFactor'> {
  const type = metaString(meta, `${arch}.rope.scaling.type`) ?? 'linear';
  if (!(ROPE_SCALING_TYPES as readonly string[]).includes(type)) {
    throw new KvfenceError(
      'unsupported_model',
      `${path}: RoPE scaling '${type}' is not supported (supported: ${ROPE_SCALING_TYPES.join(', ')})`,
    );
  }
  const factor = metaNumber(meta, `${arch}.rope.scaling.factor`) ?? metaNumber(meta, `${arch}.rope.scale_linear`) ?? 0;
  return {
    ropeFreqScale: type === 'none' || factor === 0 ? 1 : Math.fround(1 / factor),
    ropeAttnFactor: metaNumber(meta, `${arch}.rope.scaling.attn_factor`) ?? 1,
  };
}

function validate(c: ModelConfig, path: string): void {
  const fail = (what: string) => new KvfenceError('invalid_model_file', `${path}: ${what}`);
  const positive = {
    dim: c.dim,
    layerCount: c.layerCount,
    headCount: c.headCount,
    kvHeadCount: c.kvHeadCount,
    headDim: c.headDim,
    ffnDim: c.ffnDim,
    vocabSize: c.vocabSize,
    contextLength: c.contextLength,
  };
  for (const [name, value] of Object.entries(positive)) {
    if (!Number.isInteger(value) || value < 1) throw fail(`${name} is ${value}, expected a positive integer`);
  }
  // every float, read or derived, finite as f32 (the kernels' type) and above 0: an Infinity here ran and answered
  // garbage tokens as a success
  const positiveFloats = {
    'normEps (attention.layer_norm_rms_epsilon)': c.normEps,
    'ropeTheta (rope.freq_base)': c.ropeTheta,
    'ropeThetaSliding (rope.freq_base_swa)': c.ropeThetaSliding,
    'ropeFreqScale (1 / rope.scaling.factor)': c.ropeFreqScale,
    'ropeAttnFactor (rope.scaling.attn_factor)': c.ropeAttnFactor,
    embeddingScale: c.embeddingScale,
    attentionScale: c.attentionScale,
  };
  for (const [name, value] of Object.entries(positiveFloats)) {
    if (!Number.isFinite(Math.fround(value)) || value <= 0)
      throw fail(`${name} is ${value}, expected a number above 0 that f32 holds`);
  }
  // 0 turns the cap off
  if (!Number.isFinite(c.finalLogitSoftcap) || c.finalLogitSoftcap < 0) {
    throw fail(`final_logit_softcapping is ${c.finalLogitSoftcap}, expected a finite number, 0 or more`);
  }
  // the native kernels keep a head's accumulators on the stack, up to this size: a larger head would start a server
  // whose every request fails
  if (c.headDim > LIMITS.headDimMax) {
    throw new KvfenceError(
      'unsupported_model',
      `${path}: head size ${c.headDim} exceeds the ${LIMITS.headDimMax} kvfence supports (LIMITS.headDimMax)`,
    );
  }
  if (c.headCount % c.kvHeadCount !== 0)
    throw fail(`head count ${c.headCount} is not a multiple of the KV head count ${c.kvHeadCount}`);
  if (c.layerCount > LIMITS.layerCountMax) throw fail(`${c.layerCount} layers`);
  if (c.vocabSize > LIMITS.vocabSizeMax) throw fail(`vocabulary of ${c.vocabSize}`);
  if (c.contextLength > LIMITS.contextTokensMax)
    throw fail(`context length ${c.contextLength} exceeds ${LIMITS.contextTokensMax}`);
  // rotated in pairs; 0 rotates nothing (a negative count passed `% 2` as -0 and crashed the native backend)
  if (!Number.isInteger(c.ropeDim) || c.ropeDim < 0 || c.ropeDim % 2 !== 0 || c.ropeDim > c.headDim) {
    throw fail(`rope dimension ${c.ropeDim} is not an even count from 0 to the head dimension ${c.headDim}`);
  }
  // llama.cpp refuses a partial rotation for llama (its graph asserts n_rot == head size)
  if (c.arch === 'llama' && c.ropeDim !== c.headDim)
    throw fail(`rope dimension ${c.ropeDim} differs from head size ${c.headDim}`);
  if (!Number.isInteger(c.slidingWindow) || c.slidingWindow < 0)
    throw fail(`sliding window ${c.slidingWindow}, expected a non-negative integer`);
}
