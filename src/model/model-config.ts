/**
 * Model hyperparameters from GGUF metadata, validated once. Follows llama.cpp's key names (`{arch}.embedding_length`,
 * ...) and its RoPE conventions: `llama` rotates adjacent pairs (x[2i], x[2i+1]); `qwen2` rotates halves (NEOX style).
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { type GgufMetadata, metaNumber, metaString, metaStringArray } from './gguf-types.js';

export const ARCHITECTURES = ['llama', 'qwen2'] as const;
export type Architecture = (typeof ARCHITECTURES)[number];
export type RopeStyle = 'adjacent' | 'neox';

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
    if (v === undefined || !Number.isFinite(v))
      throw new KvfenceError('invalid_model_file', `${path}: ${arch}.${key} is missing`);
    return v;
  };
  const dim = need('embedding_length');
  const headCount = need('attention.head_count');
  const kvHeadCount = metaNumber(meta, `${arch}.attention.head_count_kv`) ?? headCount;
  const headDim = metaNumber(meta, `${arch}.attention.key_length`) ?? dim / headCount;
  const vocabSize =
    metaNumber(meta, `${arch}.vocab_size`) ?? metaStringArray(meta, 'tokenizer.ggml.tokens')?.length ?? 0;
  const config: ModelConfig = {
    arch,
    name: metaString(meta, 'general.name') ?? arch,
    dim,
    layerCount: need('block_count'),
    headCount,
    kvHeadCount,
    headDim,
    ffnDim: need('feed_forward_length'),
    vocabSize,
    contextLength: need('context_length'),
    normEps: metaNumber(meta, `${arch}.attention.layer_norm_rms_epsilon`) ?? 1e-6,
    ropeTheta: metaNumber(meta, `${arch}.rope.freq_base`) ?? 10000,
    ropeStyle: arch === 'llama' ? 'adjacent' : 'neox',
    ropeDim: metaNumber(meta, `${arch}.rope.dimension_count`) ?? headDim,
  };
  validate(config, path);
  return config;
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
  if (c.headCount % c.kvHeadCount !== 0)
    throw fail(`head count ${c.headCount} is not a multiple of the KV head count ${c.kvHeadCount}`);
  if (c.layerCount > LIMITS.layerCountMax) throw fail(`${c.layerCount} layers`);
  if (c.vocabSize > LIMITS.vocabSizeMax) throw fail(`vocabulary of ${c.vocabSize}`);
  if (c.contextLength > LIMITS.contextTokensMax)
    throw fail(`context length ${c.contextLength} exceeds ${LIMITS.contextTokensMax}`);
  if (c.ropeDim % 2 !== 0 || c.ropeDim > c.headDim)
    throw fail(`rope dimension ${c.ropeDim} does not fit head dimension ${c.headDim}`);
  if (!(c.normEps > 0) || !(c.ropeTheta > 0)) throw fail('norm epsilon and rope base must be positive');
}
