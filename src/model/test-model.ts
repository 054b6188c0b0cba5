/**
 * Deterministic random-weight models in GGUF, shaped like real small models, with a real BPE vocabulary that llama.cpp
 * loads too. Same options → byte-identical file. `logitScale` sets the spread of output logits: random weights give
 * near-flat distributions; a large scale makes the argmax well separated, so greedy sequences can be compared across
 * implementations without near-ties flipping a token.
 */
import { KvfenceError } from '../util/errors.js';
import { SeededRandom } from '../util/random.js';
import type { GgufMetadata, GgufTensor } from './gguf-types.js';
import { readHfTokenizer } from './hf-tokenizer.js';
import type { Architecture } from './model-config.js';
import { encodeWeights } from './quant.js';
import { LLAMA_FILE_TYPES, type MatrixRole, type ModelFileType, matrixType } from './quant-mix.js';
import { archMetadata, archTensors, fuseForArch, ropeBaseOf } from './test-model-arch.js';
import { buildTestVocabulary, type TestTokenizerKind } from './vocab-build.js';

export const TEST_PRESETS = {
  // dims are multiples of 32 so every matrix row is whole q8_0 blocks
  tiny: {
    dim: 64,
    layerCount: 2,
    headCount: 4,
    kvHeadCount: 2,
    ffnDim: 192,
    vocabSize: 512,
    contextLength: 1024,
    tied: false,
  },
  // rows of 256 and 512 values: whole K-quant super-blocks, so every matrix can take every type
  small: {
    dim: 256,
    layerCount: 2,
    headCount: 4,
    kvHeadCount: 2,
    ffnDim: 512,
    vocabSize: 512,
    contextLength: 1024,
    tied: false,
  },
  '15m': {
    dim: 288,
    layerCount: 6,
    headCount: 6,
    kvHeadCount: 6,
    ffnDim: 768,
    vocabSize: 32000,
    contextLength: 2048,
    tied: true,
  },
  // SmolLM2-135M's shape
  '135m': {
    dim: 576,
    layerCount: 30,
    headCount: 9,
    kvHeadCount: 3,
    ffnDim: 1536,
    vocabSize: 49152,
    contextLength: 8192,
    tied: true,
  },
} as const;
export type TestPreset = keyof typeof TEST_PRESETS;
export type PreTokenizerName = 'gpt-2' | 'llama3' | 'qwen2' | 'smollm';

export interface TestModelOptions {
  preset: TestPreset;
  arch: Architecture;
  /** one weight type for every matrix, or a llama-quantize mix (quant-mix.ts) */
  dtype: ModelFileType;
  seed: number;
  tokenizer?: TestTokenizerKind;
  pre?: PreTokenizerName;
  /** standard deviation of the output logits (default 1: near flat) */
  logitScale?: number;
  /** overrides the preset's declared context length */
  contextLength?: number;
  /** overrides the preset's layer count (gemma3 with 62 layers is llama.cpp's 27B type, which scales q·k otherwise) */
  layerCount?: number;
  /** overrides the preset's KV head count (grouped-query attention when below the head count) */
  kvHeadCount?: number;
  /** head size when it is not dim / heads (written as attention.key_length and value_length, as Mistral Nemo's) */
  headDim?: number;
  /** rotated dims per head when fewer than the head size (partial rotary, as phi-4-mini's) */
  ropeDim?: number;
  /** Llama 3.1's RoPE (llama only): base 500000 and rope_freqs.weight frequency factors */
  llama3Rope?: boolean;
  /** phi3: the original context above which the long RoPE factors apply (default 128) */
  ropeOriginalContext?: number;
  /** linear RoPE scaling by this factor (rope.scaling.type linear, rope.scaling.factor), as long-context fine-tunes */
  ropeLinearFactor?: number;
  /** a Hugging Face tokenizer.json whose vocabulary replaces the generated one (hf-tokenizer.ts) */
  hfTokenizer?: string;
  /** tie the output to the token embedding (default: the preset's choice) */
  tied?: boolean;
}

export interface TestModel {
  metadata: GgufMetadata;
  tensors: GgufTensor[];
}

export function makeTestModel(options: TestModelOptions): TestModel {
  const p = TEST_PRESETS[options.preset];
  const { arch, dtype } = options;
  const kvHeadCount = options.kvHeadCount ?? p.kvHeadCount;
  const layerCount = options.layerCount ?? p.layerCount;
  const headDim = options.headDim ?? p.dim / p.headCount;
  const ropeDim = options.ropeDim ?? headDim;
  const tied = options.tied ?? p.tied;
  const llama3Rope = options.llama3Rope ?? false;
  const qDim = p.headCount * headDim;
  const kvDim = kvHeadCount * headDim;
  const contextLength = options.contextLength ?? p.contextLength;
  const logitScale = options.logitScale ?? 1;
  const kind = options.tokenizer ?? 'gpt2';
  const pre = options.pre ?? (arch === 'qwen2' || arch === 'qwen3' ? 'qwen2' : 'smollm');
  const random = new SeededRandom(options.seed);

  const metadata: GgufMetadata = new Map();
  const str = (key: string, value: string) => metadata.set(key, { type: 'string', value });
  const u32 = (key: string, value: number) => metadata.set(key, { type: 'u32', value });
  const f32 = (key: string, value: number) => metadata.set(key, { type: 'f32', value });
  str('general.architecture', arch);
  str('general.name', `kvfence-test-${options.preset}-${arch}-${dtype}-s${options.seed}`);
  u32('general.alignment', 32);
  u32('general.file_type', LLAMA_FILE_TYPES[dtype]);
  u32(`${arch}.context_length`, contextLength);
  u32(`${arch}.embedding_length`, p.dim);
  u32(`${arch}.block_count`, layerCount);
  u32(`${arch}.feed_forward_length`, p.ffnDim);
  u32(`${arch}.attention.head_count`, p.headCount);
  u32(`${arch}.attention.head_count_kv`, kvHeadCount);
  u32(`${arch}.rope.dimension_count`, ropeDim);
  f32(`${arch}.rope.freq_base`, ropeBaseOf(arch, llama3Rope));
  if (options.ropeLinearFactor !== undefined) {
    str(`${arch}.rope.scaling.type`, 'linear');
    f32(`${arch}.rope.scaling.factor`, options.ropeLinearFactor);
  }
  if (options.headDim !== undefined) {
    u32(`${arch}.attention.key_length`, headDim);
    u32(`${arch}.attention.value_length`, headDim);
  }
  const shape = {
    arch,
    dim: p.dim,
    layerCount,
    headDim,
    ropeDim,
    contextLength,
    ropeOriginalContext: options.ropeOriginalContext,
  };
  archMetadata(shape, metadata);
  f32(`${arch}.attention.layer_norm_rms_epsilon`, 1e-5);
  const hf = options.hfTokenizer === undefined ? undefined : readHfTokenizer(options.hfTokenizer);
  // llama.cpp gives models named like Phi-3 special-token attributes that need <unk> <s> </s> <|endoftext|>
  if (arch === 'phi3' && hf === undefined)
    throw new KvfenceError('invalid_argument', 'a phi3 test model needs a real vocabulary (hfTokenizer)');
  const vocabSize = hf?.vocabSize ?? p.vocabSize;
  for (const [key, value] of hf?.metadata ?? buildTestVocabulary({ kind, pre, vocabSize, seed: options.seed })) {
    metadata.set(key, value);
  }
  u32(`${arch}.vocab_size`, vocabSize);

  const tensors: GgufTensor[] = [];
  const gaussian = (count: number, std: number, mean = 0) => {
    const v = new Float32Array(count);
    for (let i = 0; i < count; i++) v[i] = mean + std * random.normal();
    return v;
  };
  const mixShape = { layerCount, gqa: p.headCount / kvHeadCount, tied };
  const matrix = (name: string, role: MatrixRole, layer: number, inDim: number, outDim: number, std: number) => {
    const type = matrixType(dtype, { role, layer, rowLength: inDim }, mixShape);
    tensors.push({
      name,
      dtype: type,
      dims: [inDim, outDim],
      data: encodeWeights(gaussian(inDim * outDim, std), type),
    });
  };
  // 1-d tensors stay f32, as llama.cpp's converters and quantizer keep them.
  const vector = (name: string, length: number, std: number, mean: number) =>
    tensors.push({ name, dtype: 'f32', dims: [length], data: gaussian(length, std, mean) });

  // Tied models read logits off the token embedding. A small embedding keeps the input token from dominating the
  // residual stream (which would make the model echo its input); the output norm's scale restores the logit spread.
  const embeddingStd = tied ? 0.02 : 1;
  const outputNormMean = tied ? logitScale / (Math.sqrt(p.dim) * embeddingStd) : 1;
  matrix('token_embd.weight', 'token_embd', 0, p.dim, vocabSize, embeddingStd);
  for (let l = 0; l < layerCount; l++) {
    const b = `blk.${l}.`;
    vector(`${b}attn_norm.weight`, p.dim, 0.1, 1);
    matrix(`${b}attn_q.weight`, 'attn_q', l, p.dim, qDim, 1 / Math.sqrt(p.dim));
    matrix(`${b}attn_k.weight`, 'attn_k', l, p.dim, kvDim, 1 / Math.sqrt(p.dim));
    matrix(`${b}attn_v.weight`, 'attn_v', l, p.dim, kvDim, 1 / Math.sqrt(p.dim));
    if (arch === 'qwen2') {
      vector(`${b}attn_q.bias`, qDim, 0.1, 0);
      vector(`${b}attn_k.bias`, kvDim, 0.1, 0);
      vector(`${b}attn_v.bias`, kvDim, 0.1, 0);
    }
    matrix(`${b}attn_output.weight`, 'attn_output', l, qDim, p.dim, 0.5 / Math.sqrt(qDim));
    vector(`${b}ffn_norm.weight`, p.dim, 0.1, 1);
    matrix(`${b}ffn_gate.weight`, 'ffn_gate', l, p.dim, p.ffnDim, 1 / Math.sqrt(p.dim));
    matrix(`${b}ffn_up.weight`, 'ffn_up', l, p.dim, p.ffnDim, 1 / Math.sqrt(p.dim));
    matrix(`${b}ffn_down.weight`, 'ffn_down', l, p.ffnDim, p.dim, 0.5 / Math.sqrt(p.ffnDim));
  }
  vector('output_norm.weight', p.dim, 0.1 * outputNormMean, outputNormMean);
  if (!tied) matrix('output.weight', 'output', 0, p.dim, vocabSize, logitScale / Math.sqrt(p.dim));
  const fixed = (name: string, values: Float32Array) =>
    tensors.push({ name, dtype: 'f32', dims: [values.length], data: values });
  archTensors(shape, llama3Rope, vector, fixed);
  return { metadata, tensors: fuseForArch(arch, tensors) };
}
