/**
 * The tensors some architectures store differently from llama's layout, brought to it before weights are bound:
 * fused `attn_qkv` (any architecture, as llama.cpp's create_tensor_qkv accepts) becomes attn_q/k/v, and phi3's fused
 * `ffn_up` (gate rows first, then up rows: ggml_swiglu's halves) becomes ffn_gate and ffn_up. The parts are views of
 * the fused tensor's rows, so nothing is copied and any row-wise storage (f32, f16, block-quantized) splits the same way.
 */
import { KvfenceError } from '../util/errors.js';
import { type GgufTensor, type TensorData, tensorByteSize } from './gguf-types.js';
import type { ModelConfig } from './model-config.js';

/** Rows [from, to) of a 2-d tensor, as a tensor of its own. */
function rowsOf(t: GgufTensor, name: string, from: number, to: number): GgufTensor {
  const inDim = t.dims[0]!;
  // block formats are stored as bytes (a row is whole blocks), the others as one element per value
  const unitsPerRow = t.data instanceof Uint8Array ? tensorByteSize(t.dtype, inDim) : inDim;
  const data: TensorData = t.data.subarray(from * unitsPerRow, to * unitsPerRow);
  return { name, dtype: t.dtype, dims: [inDim, to - from], data };
}

/** Returns `tensors` with fused tensors split into llama's names; the map given is not changed. */
export function splitFusedTensors(
  config: ModelConfig,
  tensors: ReadonlyMap<string, GgufTensor>,
  path: string,
): Map<string, GgufTensor> {
  const out = new Map(tensors);
  const qDim = config.headCount * config.headDim;
  const kvDim = config.kvHeadCount * config.headDim;
  const fail = (what: string) => new KvfenceError('invalid_model_file', `${path}: ${what}`);
  for (let l = 0; l < config.layerCount; l++) {
    const p = `blk.${l}.`;
    const qkv = tensors.get(`${p}attn_qkv.weight`);
    if (qkv !== undefined) {
      if (qkv.dims.length !== 2 || qkv.dims[1] !== qDim + 2 * kvDim)
        throw fail(`tensor ${p}attn_qkv.weight has shape [${qkv.dims}], expected [${config.dim}, ${qDim + 2 * kvDim}]`);
      if (tensors.has(`${p}attn_q.weight`)) throw fail(`layer ${l} has both fused and separate Q/K/V`);
      if (tensors.has(`${p}attn_qkv.bias`)) throw fail(`tensor ${p}attn_qkv.bias is not supported`);
      out.set(`${p}attn_q.weight`, rowsOf(qkv, `${p}attn_q.weight`, 0, qDim));
      out.set(`${p}attn_k.weight`, rowsOf(qkv, `${p}attn_k.weight`, qDim, qDim + kvDim));
      out.set(`${p}attn_v.weight`, rowsOf(qkv, `${p}attn_v.weight`, qDim + kvDim, qDim + 2 * kvDim));
      out.delete(`${p}attn_qkv.weight`);
    }
    const up = tensors.get(`${p}ffn_up.weight`);
    if (config.arch === 'phi3' && up !== undefined && !tensors.has(`${p}ffn_gate.weight`)) {
      if (up.dims.length !== 2 || up.dims[1] !== 2 * config.ffnDim)
        throw fail(`tensor ${p}ffn_up.weight has shape [${up.dims}], expected [${config.dim}, ${2 * config.ffnDim}]`);
      out.set(`${p}ffn_gate.weight`, rowsOf(up, `${p}ffn_gate.weight`, 0, config.ffnDim));
      out.set(`${p}ffn_up.weight`, rowsOf(up, `${p}ffn_up.weight`, config.ffnDim, 2 * config.ffnDim));
    }
  }
  return out;
}

/**
 * The RoPE frequency factors llama.cpp divides each pair's frequency by (get_rope_factors): Llama 3.1/3.2's
 * `rope_freqs`, else phi3's `rope_factors_long` when the model's context exceeds the original one, else
 * `rope_factors_short`; undefined when the file has none.
 */
export function ropeFactorTensorName(config: ModelConfig, has: (name: string) => boolean): string | undefined {
  const candidates = [
    'rope_freqs.weight',
    config.contextLength > config.ropeOriginalContext ? 'rope_factors_long.weight' : 'rope_factors_short.weight',
  ];
  return candidates.find(has);
}
