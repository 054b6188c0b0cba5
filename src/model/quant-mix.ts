/**
 * Which weight type each matrix of a generated model gets, as llama-quantize chooses it (llama.cpp's
 * src/llama-quant.cpp: llama_tensor_get_type and tensor_type_fallback), for a llama-style dense model.
 *
 * - A weight type name (f32 … q6_k) is `llama-quantize --pure`: every matrix that type.
 * - A mix name (q2_k_s, q3_k_s/m/l, q4_k_s/m, q5_k_s/m) applies llama-quantize's per-tensor rules: the output matrix
 *   (and the token embedding when the output is tied to it) in Q6_K; more bits for attn_v and ffn_down in the first and
 *   last eighths of the layers and every third layer between them ("use_more_bits"), and so on.
 * - Either way, a matrix whose rows are not whole blocks of its type falls back as llama-quantize's does: Q4_K → Q5_0,
 *   Q5_K → Q5_1, Q6_K → Q8_0, Q2_K/Q3_K → Q4_0, and to F16 when even that does not fit. SmolLM2-135M's width (576) is
 *   not a multiple of 256, so its real Q4_K_M file is mostly Q5_0, and so is the one generated here.
 */
import { blockSize, type WeightDType } from './gguf-types.js';

export const QUANT_MIXES = ['q2_k_s', 'q3_k_s', 'q3_k_m', 'q3_k_l', 'q4_k_s', 'q4_k_m', 'q5_k_s', 'q5_k_m'] as const;
export type QuantMix = (typeof QUANT_MIXES)[number];
/** What `model make-test --dtype` accepts: one weight type for every matrix, or a llama-quantize mix. */
export type ModelFileType = WeightDType | QuantMix;

/** llama.cpp's llama_ftype codes, written as general.file_type (informational: readers go by each tensor's type). */
export const LLAMA_FILE_TYPES: Readonly<Record<ModelFileType, number>> = {
  f32: 0,
  f16: 1,
  q4_0: 2,
  q4_1: 3,
  q8_0: 7,
  q5_0: 8,
  q5_1: 9,
  q2_k: 10,
  q3_k_s: 11,
  q3_k_m: 12,
  q3_k_l: 13,
  q4_k_s: 14,
  q4_k_m: 15,
  q5_k_s: 16,
  q5_k_m: 17,
  q6_k: 18,
  q2_k_s: 21,
  bf16: 32,
  // pure K-quant files: the mix whose base type they share
  q3_k: 11,
  q4_k: 14,
  q5_k: 16,
};

const MIX_BASE: Readonly<Record<QuantMix, WeightDType>> = {
  q2_k_s: 'q2_k',
  q3_k_s: 'q3_k',
  q3_k_m: 'q3_k',
  q3_k_l: 'q3_k',
  q4_k_s: 'q4_k',
  q4_k_m: 'q4_k',
  q5_k_s: 'q5_k',
  q5_k_m: 'q5_k',
};

export function isQuantMix(fileType: ModelFileType): fileType is QuantMix {
  return (QUANT_MIXES as readonly string[]).includes(fileType);
}

/** The role of a matrix in a llama-style model, from its GGUF name. */
export type MatrixRole =
  | 'token_embd'
  | 'output'
  | 'attn_q'
  | 'attn_k'
  | 'attn_v'
  | 'attn_output'
  | 'ffn_gate'
  | 'ffn_up'
  | 'ffn_down';

export interface MatrixChoice {
  role: MatrixRole;
  /** the layer, for per-layer roles */
  layer: number;
  /** values per row (ggml ne[0]) */
  rowLength: number;
}

export interface ModelShapeForMix {
  layerCount: number;
  /** query heads per KV head (llama.cpp's n_gqa) */
  gqa: number;
  /** no output.weight: the token embedding is the output matrix */
  tied: boolean;
}

// first and last eighth of the layers, and every third layer in between
function useMoreBits(layer: number, layerCount: number): boolean {
  const eighth = Math.floor(layerCount / 8);
  return layer < eighth || layer >= Math.floor((7 * layerCount) / 8) || (layer - eighth) % 3 === 2;
}

function mixRule(mix: QuantMix, base: WeightDType, m: MatrixChoice, shape: ModelShapeForMix): WeightDType {
  const { layer } = m;
  const { layerCount } = shape;
  if (m.role === 'output' || (m.role === 'token_embd' && shape.tied)) {
    return m.rowLength % blockSize(base) !== 0 ? 'q8_0' : 'q6_k';
  }
  switch (m.role) {
    case 'attn_v':
      if (mix === 'q2_k_s' && shape.gqa >= 4) return 'q4_k';
      if (mix === 'q3_k_m') return layer < 2 ? 'q5_k' : 'q4_k';
      if (mix === 'q3_k_l') return 'q5_k';
      if ((mix === 'q4_k_m' || mix === 'q5_k_m') && useMoreBits(layer, layerCount)) return 'q6_k';
      if (mix === 'q4_k_s' && layer < 4) return 'q5_k';
      return base;
    case 'ffn_down':
      if (mix === 'q2_k_s') return layer < Math.floor(layerCount / 8) ? 'q4_k' : base;
      if (mix === 'q3_k_m') return layer < Math.floor(layerCount / 16) ? 'q5_k' : 'q4_k';
      if (mix === 'q3_k_l') return 'q5_k';
      if ((mix === 'q4_k_m' || mix === 'q5_k_m') && useMoreBits(layer, layerCount)) return 'q6_k';
      if (mix === 'q4_k_s' && layer < Math.floor(layerCount / 8)) return 'q5_k';
      return base;
    case 'attn_output':
      if (mix === 'q3_k_m') return 'q4_k';
      if (mix === 'q3_k_l') return 'q5_k';
      return base;
    default:
      return base;
  }
}

const FALLBACK: Partial<Record<WeightDType, WeightDType>> = {
  q2_k: 'q4_0',
  q3_k: 'q4_0',
  q4_k: 'q5_0',
  q5_k: 'q5_1',
  q6_k: 'q8_0',
};

/** llama-quantize's tensor_type_fallback: a type whose blocks fit the row, else F16. */
function fitRow(dtype: WeightDType, rowLength: number): WeightDType {
  if (rowLength % blockSize(dtype) === 0) return dtype;
  const fallback = FALLBACK[dtype] ?? dtype;
  return rowLength % blockSize(fallback) === 0 ? fallback : 'f16';
}

/** The storage type of one matrix of a model written as `fileType`. */
export function matrixType(fileType: ModelFileType, m: MatrixChoice, shape: ModelShapeForMix): WeightDType {
  if (!isQuantMix(fileType)) {
    return fileType === 'f32' || fileType === 'f16' || fileType === 'bf16' ? fileType : fitRow(fileType, m.rowLength);
  }
  const base = MIX_BASE[fileType];
  return fitRow(mixRule(fileType, base, m, shape), m.rowLength);
}
