/**
 * The kernels a forward pass needs. Every implementation must be deterministic and batch-invariant: a row's result
 * depends only on that row's inputs (fixed reduction order), never on which or how many other rows share the call.
 * Buffers are row-major; `rowCount` rows of the stated width.
 */
import type { KvArena, KvLayout } from '../kv/kv-layout.js';
import type { RopeStyle } from '../model/model-config.js';
import type { WeightMatrix } from '../model/weights.js';

/**
 * Which KV each attention row reads: row r sees tokens [kvStarts[r], kvLengths[r]) through its page table (from 0
 * when kvStarts is absent; a sliding-window layer starts later).
 */
export interface AttentionRows {
  rowCount: number;
  kvLengths: Int32Array; // (rowCount)
  kvStarts?: Int32Array; // (rowCount)
  /** all rows' page tables, concatenated; row r's table starts at pageTableStarts[r] */
  pageTables: Int32Array;
  pageTableStarts: Int32Array; // (rowCount)
}

/**
 * One product of a matmuls() call: out (rowCount, w.outDim) = x · wᵀ, rounded to f32, plus bias (one more f32
 * rounding) when given; with accumulate, out += that (another f32 rounding: the residual add).
 */
export interface MatmulPart {
  out: Float32Array;
  w: WeightMatrix;
  bias?: Float32Array | undefined; // (w.outDim)
  accumulate?: boolean;
}

/** Where storeKv writes row r: position positions[r] of the sequence whose page table starts at pageTableStarts[r]. */
export interface KvRows {
  rowCount: number;
  positions: Int32Array; // (rowCount)
  pageTables: Int32Array;
  pageTableStarts: Int32Array; // (rowCount)
}

export interface AttentionShape {
  layer: number;
  headCount: number;
  kvHeadCount: number;
  headDim: number;
  layout: KvLayout;
}

/**
 * RoPE beyond the plain rotation (llama.cpp's ggml_rope_ext without YaRN): pair i of position pos turns by
 * pos · θ^(-2i/ropeDim) / factors[i] · freqScale, and its cos and sin are multiplied by attnFactor.
 */
export interface RopeScaling {
  freqScale: number;
  attnFactor: number;
  factors: Float32Array | undefined; // (ropeDim/2)
}

/** The angle both backends rotate by, one expression so that they agree to the bit (plain: factor and scale of 1). */
export function ropeAngle(pos: number, i: number, ropeDim: number, theta: number, s?: RopeScaling): number {
  const plain = pos * theta ** ((-2 * i) / ropeDim);
  return s === undefined ? plain : (plain / (s.factors?.[i] ?? 1)) * s.freqScale;
}

export interface Backend {
  readonly name: string;
  /** out (rowCount, w.outDim) = x (rowCount, w.inDim) · wᵀ */
  matmul(out: Float32Array, x: Float32Array, rowCount: number, w: WeightMatrix): void;
  /**
   * Every part's product of the one input x (rowCount, inDim), as one call (the native backend: one thread-pool
   * dispatch); each output the same bits as matmul() gives, before the part's bias and accumulate.
   */
  matmuls(x: Float32Array, rowCount: number, parts: readonly MatmulPart[]): void;
  /** writes row r of k and of v (rowCount, layout.kvDim), rounded to f16, into layer `layer`'s K and V slots of its position */
  storeKv(k: Float32Array, v: Float32Array, rows: KvRows, layer: number, layout: KvLayout, arena: KvArena): void;
  /** out (rowCount, dim) = x / sqrt(mean(x²) + eps) * weight */
  rmsNorm(out: Float32Array, x: Float32Array, rowCount: number, weight: Float32Array, eps: number): void;
  /** rotates the first ropeDim values of each head of x (rowCount, headCount*headDim) in place, row r at positions[r] */
  rope(
    x: Float32Array,
    rowCount: number,
    headCount: number,
    headDim: number,
    ropeDim: number,
    positions: Int32Array,
    theta: number,
    style: RopeStyle,
    scaling?: RopeScaling,
  ): void;
  /** gate (n) = silu(gate) * up, in place */
  swiglu(gate: Float32Array, up: Float32Array, n: number): void;
  /** gate (n) = gelu(gate) * up, in place (tanh GELU; both backends run geglu.ts, so they agree to the bit) */
  geglu(gate: Float32Array, up: Float32Array, n: number): void;
  /** out (rowCount, headCount*headDim) = softmax(q kᵀ / sqrt(headDim)) v over each row's pages (rows.kvStarts on) */
  attention(out: Float32Array, q: Float32Array, rows: AttentionRows, shape: AttentionShape, arena: KvArena): void;
  /** out (tokens.length, w.inDim) = rows `tokens` of w, as f32 */
  embed(out: Float32Array, tokens: Int32Array, w: WeightMatrix): void;
}
