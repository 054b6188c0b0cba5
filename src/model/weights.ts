/**
 * Model weights bound to their roles, with shapes checked against the config. Matrices keep their file storage
 * (f32, f16, bf16 or q8_0); norms and biases are f32 (as llama.cpp stores 1-d tensors).
 * Tensor names and layouts are llama.cpp's: a matrix with ggml dims [inDim, outDim] is outDim rows of inDim values.
 */
import { KvfenceError } from '../util/errors.js';
import { ropeFactorTensorName, splitFusedTensors } from './arch-weights.js';
import { type GgufTensor, isQuantized, type TensorData, type WeightDType } from './gguf-types.js';
import type { ModelConfig } from './model-config.js';
import { decodeWeights } from './quant.js';

export interface WeightMatrix {
  name: string;
  dtype: WeightDType;
  /** values per row (ggml dims[0]) */
  inDim: number;
  /** rows (ggml dims[1]) */
  outDim: number;
  data: TensorData;
}

export interface LayerWeights {
  attnNorm: Float32Array; // (dim)
  wq: WeightMatrix; // (headCount*headDim rows, dim)
  wk: WeightMatrix; // (kvHeadCount*headDim rows, dim)
  wv: WeightMatrix; // (kvHeadCount*headDim rows, dim)
  wo: WeightMatrix; // (dim rows, headCount*headDim)
  bq: Float32Array | undefined; // (headCount*headDim), qwen2 only
  bk: Float32Array | undefined; // (kvHeadCount*headDim)
  bv: Float32Array | undefined; // (kvHeadCount*headDim)
  ffnNorm: Float32Array; // (dim)
  wGate: WeightMatrix; // (ffnDim rows, dim)
  wUp: WeightMatrix; // (ffnDim rows, dim)
  wDown: WeightMatrix; // (dim rows, ffnDim)
  qNorm: Float32Array | undefined; // (headDim), per-head RMSNorm of Q: qwen3, gemma3
  kNorm: Float32Array | undefined; // (headDim)
  postAttnNorm: Float32Array | undefined; // (dim), gemma3's norm of the attention output
  postFfnNorm: Float32Array | undefined; // (dim), gemma3's norm of the FFN output
}

export interface ModelWeights {
  tokenEmbedding: WeightMatrix; // (vocabSize rows, dim)
  layers: LayerWeights[];
  outputNorm: Float32Array; // (dim)
  /** (vocabSize rows, dim); the token embedding itself when the file ties them (no output.weight) */
  output: WeightMatrix;
  /** (ropeDim/2) RoPE frequency divisors (arch-weights.ts: ropeFactorTensorName), undefined when the file has none */
  ropeFactors: Float32Array | undefined;
}

export function bindWeights(config: ModelConfig, fileTensors: Map<string, GgufTensor>, path: string): ModelWeights {
  return bind(config, fileTensors, path, true);
}

/**
 * bindWeights' checks of names, shapes and fused splits on the header's tensor table, before any weight memory is set
 * aside or any weight read: a file missing a tensor, or with one of the wrong shape, is refused at once, not after
 * reading gigabytes. (The values' own checks, finite vectors, come with the weights.)
 */
export function checkTensorTable(
  config: ModelConfig,
  table: readonly Pick<GgufTensor, 'name' | 'dtype' | 'dims'>[],
  path: string,
): void {
  const empty = (dtype: WeightDType): TensorData =>
    dtype === 'f32' ? new Float32Array(0) : isQuantized(dtype) ? new Uint8Array(0) : new Uint16Array(0);
  bind(config, new Map(table.map((t) => [t.name, { ...t, data: empty(t.dtype) }])), path, false);
}

/** The binding; with `withValues` false, of tensors without data (their vectors come back empty). */
function bind(config: ModelConfig, fileTensors: Map<string, GgufTensor>, path: string, withValues: boolean) {
  const tensors = splitFusedTensors(config, fileTensors, path);
  const fail = (what: string) => new KvfenceError('invalid_model_file', `${path}: ${what}`);
  const get = (name: string): GgufTensor => {
    const t = tensors.get(name);
    if (t === undefined) throw fail(`tensor ${name} is missing`);
    return t;
  };
  const matrix = (name: string, inDim: number, outDim: number): WeightMatrix => {
    const t = get(name);
    if (t.dims.length !== 2 || t.dims[0] !== inDim || t.dims[1] !== outDim) {
      throw fail(`tensor ${name} has shape [${t.dims}], expected [${inDim}, ${outDim}]`);
    }
    return { name, dtype: t.dtype, inDim, outDim, data: t.data };
  };
  const vector = (name: string, length: number): Float32Array => {
    const t = get(name);
    if (t.dims.length !== 1 || t.dims[0] !== length)
      throw fail(`tensor ${name} has shape [${t.dims}], expected [${length}]`);
    if (!withValues) return new Float32Array(0);
    let out = t.data as Float32Array;
    if (t.dtype !== 'f32') {
      out = new Float32Array(length);
      decodeWeights(t.data, t.dtype, 0, length, out);
    }
    // a vector (a norm, a bias, RoPE factors) scales every value through it: a NaN or infinity here made NaN logits
    const bad = out.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) throw fail(`tensor ${name} holds ${out[bad]} at ${bad}, expected finite values`);
    return out;
  };
  const optionalVector = (name: string, length: number) => (tensors.has(name) ? vector(name, length) : undefined);
  /** RoPE's frequency factors divide the frequencies: one of 0 or below is no rotation llama.cpp could mean */
  const positiveVector = (name: string, length: number): Float32Array => {
    const out = vector(name, length);
    const bad = out.findIndex((v) => !(v > 0));
    if (bad >= 0) throw fail(`tensor ${name} holds ${out[bad]} at ${bad}, expected values above 0`);
    return out;
  };

  const { dim, headDim, ffnDim, vocabSize } = config;
  const qDim = config.headCount * headDim;
  const kvDim = config.kvHeadCount * headDim;
  const qkNorm = config.arch === 'qwen3' || config.arch === 'gemma3';
  const sandwich = config.arch === 'gemma3';
  const layers: LayerWeights[] = [];
  for (let l = 0; l < config.layerCount; l++) {
    const p = `blk.${l}.`;
    layers.push({
      attnNorm: vector(`${p}attn_norm.weight`, dim),
      wq: matrix(`${p}attn_q.weight`, dim, qDim),
      wk: matrix(`${p}attn_k.weight`, dim, kvDim),
      wv: matrix(`${p}attn_v.weight`, dim, kvDim),
      wo: matrix(`${p}attn_output.weight`, qDim, dim),
      bq: optionalVector(`${p}attn_q.bias`, qDim),
      bk: optionalVector(`${p}attn_k.bias`, kvDim),
      bv: optionalVector(`${p}attn_v.bias`, kvDim),
      ffnNorm: vector(`${p}ffn_norm.weight`, dim),
      wGate: matrix(`${p}ffn_gate.weight`, dim, ffnDim),
      wUp: matrix(`${p}ffn_up.weight`, dim, ffnDim),
      wDown: matrix(`${p}ffn_down.weight`, ffnDim, dim),
      qNorm: qkNorm ? vector(`${p}attn_q_norm.weight`, headDim) : undefined,
      kNorm: qkNorm ? vector(`${p}attn_k_norm.weight`, headDim) : undefined,
      postAttnNorm: sandwich ? vector(`${p}post_attention_norm.weight`, dim) : undefined,
      postFfnNorm: sandwich ? vector(`${p}post_ffw_norm.weight`, dim) : undefined,
    });
  }
  const tokenEmbedding = matrix('token_embd.weight', dim, vocabSize);
  const ropeFactors = ropeFactorTensorName(config, (name) => tensors.has(name));
  return {
    tokenEmbedding,
    layers,
    outputNorm: vector('output_norm.weight', dim),
    output: tensors.has('output.weight') ? matrix('output.weight', dim, vocabSize) : tokenEmbedding,
    ropeFactors: ropeFactors === undefined ? undefined : positiveVector(ropeFactors, config.ropeDim / 2),
  };
}
