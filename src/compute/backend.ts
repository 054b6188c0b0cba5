/**
 * The kernels a forward pass needs. Every implementation must be deterministic and batch-invariant: a row's result
 * depends only on that row's inputs (fixed reduction order), never on which or how many other rows share the call.
 * Buffers are row-major; `rowCount` rows of the stated width.
 */
import type { KvLayout } from '../kv/kv-layout.js';
import type { RopeStyle } from '../model/model-config.js';
import type { WeightMatrix } from '../model/weights.js';

/** Which KV each attention row reads: row r sees tokens [0, kvLengths[r]) through its page table. */
export interface AttentionRows {
  rowCount: number;
  kvLengths: Int32Array; // (rowCount)
  /** all rows' page tables, concatenated; row r's table starts at pageTableStarts[r] */
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

export interface Backend {
  readonly name: string;
  /** out (rowCount, w.outDim) = x (rowCount, w.inDim) · wᵀ */
  matmul(out: Float32Array, x: Float32Array, rowCount: number, w: WeightMatrix): void;
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
  ): void;
  /** gate (n) = silu(gate) * up, in place */
  swiglu(gate: Float32Array, up: Float32Array, n: number): void;
  /** out (rowCount, headCount*headDim) = softmax(q kᵀ / sqrt(headDim)) v over each row's pages */
  attention(out: Float32Array, q: Float32Array, rows: AttentionRows, shape: AttentionShape, arena: Float32Array): void;
  /** out (tokens.length, w.inDim) = rows `tokens` of w, as f32 */
  embed(out: Float32Array, tokens: Int32Array, w: WeightMatrix): void;
}
