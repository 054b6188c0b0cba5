/**
 * What generated test models of each architecture add to the llama layout (test-model.ts writes the llama part):
 * metadata keys, extra tensors and, for phi3, the fused tensors llama.cpp's converter writes. Shapes and keys follow
 * llama.cpp's loaders (src/models/{qwen3,gemma3,phi3,llama}.cpp), so llama.cpp loads every one of these files.
 */
import type { GgufMetadata, GgufTensor, TensorData } from './gguf-types.js';
import type { Architecture } from './model-config.js';

export interface ArchShape {
  arch: Architecture;
  dim: number;
  layerCount: number;
  headDim: number;
  ropeDim: number;
  contextLength: number;
  /** phi3: rope.scaling.original_context_length */
  ropeOriginalContext: number | undefined;
}

/** llama.cpp's default base per family: Qwen and Gemma 3 (global layers) 1e6, Llama 3 5e5, the rest 1e4. */
export function ropeBaseOf(arch: Architecture, llama3Rope: boolean): number {
  if (arch === 'qwen2' || arch === 'qwen3' || arch === 'gemma3') return 1_000_000;
  return llama3Rope ? 500_000 : 10_000;
}

/** Gemma 3's pattern (5 sliding-window layers, then a global one) shortened so the 2-layer preset has both kinds. */
const GEMMA3_TEST_SWA_PERIOD = 2;
const GEMMA3_TEST_WINDOW = 8;
/** phi3's long-context keys: the long factors apply above this original context (unless the options give another) */
const PHI3_TEST_ORIGINAL_CONTEXT = 128;
const PHI3_TEST_ATTN_FACTOR = 1.1902380714238083; // Phi-3-mini-128k's √(1 + ln(32) / ln(4096))
/** Llama 3.1's rope_scaling (factor 8, low/high frequency factors 1 and 4) over a short original context, so that
 * the factors differ across the pairs of a small head */
const LLAMA3_ROPE = { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContext: 64 } as const;

export function archMetadata(shape: ArchShape, meta: GgufMetadata): void {
  const { arch } = shape;
  const u32 = (key: string, value: number) => meta.set(key, { type: 'u32', value });
  const f32 = (key: string, value: number) => meta.set(key, { type: 'f32', value });
  if (arch === 'gemma3') {
    u32('gemma3.attention.sliding_window', GEMMA3_TEST_WINDOW);
    u32('gemma3.attention.sliding_window_pattern', GEMMA3_TEST_SWA_PERIOD);
    f32('gemma3.rope.freq_base_swa', 10_000);
  }
  if (arch === 'phi3') {
    u32('phi3.rope.scaling.original_context_length', shape.ropeOriginalContext ?? PHI3_TEST_ORIGINAL_CONTEXT);
    f32('phi3.rope.scaling.attn_factor', PHI3_TEST_ATTN_FACTOR);
  }
}

/** Llama 3.1's frequency factors (transformers' _compute_llama3_parameters, as divisors of each pair's frequency). */
function llama3RopeFactors(base: number, ropeDim: number): Float32Array {
  const { factor, lowFreqFactor, highFreqFactor, originalContext } = LLAMA3_ROPE;
  const factors = new Float32Array(ropeDim / 2);
  for (let i = 0; i < ropeDim / 2; i++) {
    const wavelength = (2 * Math.PI) / base ** ((-2 * i) / ropeDim);
    if (wavelength < originalContext / highFreqFactor) factors[i] = 1;
    else if (wavelength > originalContext / lowFreqFactor) factors[i] = factor;
    else {
      const smooth = (originalContext / wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
      factors[i] = 1 / ((1 - smooth) / factor + smooth);
    }
  }
  return factors;
}

/**
 * The tensors an architecture adds, drawn after the llama ones (so llama models stay byte-identical): per-head Q/K
 * norms (qwen3, gemma3), sandwich norms (gemma3), RoPE factors (llama 3, phi3).
 */
export function archTensors(
  shape: ArchShape,
  llama3Rope: boolean,
  vector: (name: string, length: number, std: number, mean: number) => void,
  fixed: (name: string, values: Float32Array) => void,
): void {
  const { arch } = shape;
  for (let l = 0; l < shape.layerCount; l++) {
    const b = `blk.${l}.`;
    if (arch === 'qwen3' || arch === 'gemma3') {
      vector(`${b}attn_q_norm.weight`, shape.headDim, 0.1, 1);
      vector(`${b}attn_k_norm.weight`, shape.headDim, 0.1, 1);
    }
    if (arch === 'gemma3') {
      vector(`${b}post_attention_norm.weight`, shape.dim, 0.1, 1);
      vector(`${b}post_ffw_norm.weight`, shape.dim, 0.1, 1);
    }
  }
  if (arch === 'llama' && llama3Rope)
    fixed('rope_freqs.weight', llama3RopeFactors(ropeBaseOf(arch, true), shape.ropeDim));
  if (arch === 'phi3') {
    // Phi-3's long factors grow from 1 to tens over the pairs; the short ones stay near 1
    const pairs = shape.ropeDim / 2;
    fixed(
      'rope_factors_long.weight',
      Float32Array.from({ length: pairs }, (_, i) => 1 + (i * 24) / pairs),
    );
    fixed(
      'rope_factors_short.weight',
      Float32Array.from({ length: pairs }, (_, i) => 1 + (i * 0.1) / pairs),
    );
  }
}

function concatRows(parts: readonly GgufTensor[], name: string): GgufTensor {
  const first = parts[0]!;
  const total = parts.reduce((n, t) => n + t.data.length, 0);
  const data: TensorData =
    first.data instanceof Float32Array
      ? new Float32Array(total)
      : first.data instanceof Uint16Array
        ? new Uint16Array(total)
        : new Uint8Array(total);
  let offset = 0;
  for (const t of parts) {
    data.set(t.data as never, offset);
    offset += t.data.length;
  }
  const rows = parts.reduce((n, t) => n + t.dims[1]!, 0);
  return { name, dtype: first.dtype, dims: [first.dims[0]!, rows], data };
}

/** phi3 files fuse Q, K, V into attn_qkv and gate, up into ffn_up (gate rows first), as llama.cpp's converter does. */
export function fuseForArch(arch: Architecture, tensors: GgufTensor[]): GgufTensor[] {
  if (arch !== 'phi3') return tensors;
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const out: GgufTensor[] = [];
  for (const t of tensors) {
    const m = /^blk\.(\d+)\.(attn_q|attn_k|attn_v|ffn_gate|ffn_up)\.weight$/.exec(t.name);
    if (m === null) {
      out.push(t);
      continue;
    }
    const b = `blk.${m[1]}.`;
    const part = (n: string) => byName.get(`${b}${n}.weight`)!;
    if (m[2] === 'attn_q')
      out.push(concatRows([part('attn_q'), part('attn_k'), part('attn_v')], `${b}attn_qkv.weight`));
    if (m[2] === 'ffn_gate') out.push(concatRows([part('ffn_gate'), part('ffn_up')], `${b}ffn_up.weight`));
  }
  return out;
}
