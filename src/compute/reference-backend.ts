/**
 * The reference backend in plain TypeScript: the oracle other backends are checked against. Each row is computed on its
 * own with sums accumulated in f64 in index order, so results are deterministic and batch-invariant by construction.
 */
import { type KvArena, type KvLayout, kvOffset } from '../kv/kv-layout.js';
import type { RopeStyle } from '../model/model-config.js';
import { decodeWeights } from '../model/quant.js';
import type { WeightMatrix } from '../model/weights.js';
import { assert } from '../util/assert.js';
import { f16Table, f32ToF16 } from '../util/half.js';
import {
  type AttentionRows,
  type AttentionShape,
  type Backend,
  type KvRows,
  type MatmulPart,
  type RopeScaling,
  ropeAngle,
} from './backend.js';
import { gegluInPlace } from './geglu.js';

export class ReferenceBackend implements Backend {
  readonly name = 'reference';
  private scratch = new Float32Array(0);
  private scores = new Float64Array(0);
  private acc = new Float64Array(0);

  private accumulator(n: number): Float64Array {
    if (this.acc.length < n) this.acc = new Float64Array(n);
    this.acc.fill(0, 0, n);
    return this.acc;
  }

  private rowScratch(n: number): Float32Array {
    if (this.scratch.length < n) this.scratch = new Float32Array(n);
    return this.scratch;
  }

  matmul(out: Float32Array, x: Float32Array, rowCount: number, w: WeightMatrix): void {
    this.product(x, rowCount, { out, w });
  }

  matmuls(x: Float32Array, rowCount: number, parts: readonly MatmulPart[]): void {
    for (const part of parts) this.product(x, rowCount, part);
  }

  /** Each value rounded to f16 (nearest even), as the native kernel stores it. */
  storeKv(k: Float32Array, v: Float32Array, rows: KvRows, layer: number, layout: KvLayout, arena: KvArena): void {
    const { kvDim, pageSize } = layout;
    for (let r = 0; r < rows.rowCount; r++) {
      const pos = rows.positions[r]!;
      const page = rows.pageTables[rows.pageTableStarts[r]! + Math.floor(pos / pageSize)];
      assert(page !== undefined, `row ${r}'s position ${pos} runs past its page table`);
      const kAt = kvOffset(layout, page, layer, 0, pos % pageSize);
      const vAt = kvOffset(layout, page, layer, 1, pos % pageSize);
      for (let i = 0; i < kvDim; i++) {
        arena[kAt + i] = f32ToF16(k[r * kvDim + i]!);
        arena[vAt + i] = f32ToF16(v[r * kvDim + i]!);
      }
    }
  }

  /** The sum in f64, rounded to f32; then the bias and the accumulation, each rounded to f32 as the native tile does. */
  private product(x: Float32Array, rowCount: number, { out, w, bias, accumulate }: MatmulPart): void {
    const { inDim, outDim } = w;
    assert(x.length >= rowCount * inDim && out.length >= rowCount * outDim, `matmul ${w.name}: buffers too small`);
    assert(bias === undefined || bias.length === outDim, `matmul ${w.name}: the bias needs ${outDim} values`);
    const f32 = w.dtype === 'f32' ? (w.data as Float32Array) : undefined;
    const row = this.rowScratch(inDim);
    for (let o = 0; o < outDim; o++) {
      let wRow: Float32Array;
      let base = 0;
      if (f32 !== undefined) {
        wRow = f32;
        base = o * inDim;
      } else {
        decodeWeights(w.data, w.dtype, o * inDim, inDim, row);
        wRow = row;
      }
      for (let r = 0; r < rowCount; r++) {
        const xBase = r * inDim;
        let sum = 0;
        for (let i = 0; i < inDim; i++) sum += x[xBase + i]! * wRow[base + i]!;
        let value = Math.fround(sum);
        if (bias !== undefined) value = Math.fround(value + bias[o]!);
        // the Float32Array store rounds the f64 sum of two f32 values once: the f32 add
        out[r * outDim + o] = accumulate === true ? out[r * outDim + o]! + value : value;
      }
    }
  }

  rmsNorm(out: Float32Array, x: Float32Array, rowCount: number, weight: Float32Array, eps: number): void {
    const dim = weight.length;
    for (let r = 0; r < rowCount; r++) {
      let sum = 0;
      for (let i = 0; i < dim; i++) sum += x[r * dim + i]! * x[r * dim + i]!;
      const scale = Math.fround(1 / Math.sqrt(Math.fround(sum / dim) + eps));
      for (let i = 0; i < dim; i++) out[r * dim + i] = Math.fround(x[r * dim + i]! * scale) * weight[i]!;
    }
  }

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
  ): void {
    const half = ropeDim / 2;
    const mscale = scaling?.attnFactor ?? 1;
    for (let r = 0; r < rowCount; r++) {
      const pos = positions[r]!;
      for (let h = 0; h < headCount; h++) {
        const base = (r * headCount + h) * headDim;
        for (let i = 0; i < half; i++) {
          const angle = ropeAngle(pos, i, ropeDim, theta, scaling);
          const cos = Math.cos(angle) * mscale;
          const sin = Math.sin(angle) * mscale;
          const a = style === 'adjacent' ? base + 2 * i : base + i;
          const b = style === 'adjacent' ? a + 1 : a + half;
          const x0 = x[a]!;
          const x1 = x[b]!;
          x[a] = x0 * cos - x1 * sin;
          x[b] = x0 * sin + x1 * cos;
        }
      }
    }
  }

  swiglu(gate: Float32Array, up: Float32Array, n: number): void {
    for (let i = 0; i < n; i++) {
      const g = gate[i]!;
      gate[i] = Math.fround(g / (1 + Math.exp(-g))) * up[i]!;
    }
  }

  geglu(gate: Float32Array, up: Float32Array, n: number): void {
    gegluInPlace(gate, up, n);
  }

  attention(out: Float32Array, q: Float32Array, rows: AttentionRows, shape: AttentionShape, arena: KvArena): void {
    const { headCount, kvHeadCount, headDim, layout, layer } = shape;
    const half = f16Table();
    const qDim = headCount * headDim;
    const group = headCount / kvHeadCount;
    const scale = 1 / Math.sqrt(headDim);
    for (let r = 0; r < rows.rowCount; r++) {
      const kvLength = rows.kvLengths[r]!;
      const kvStart = rows.kvStarts?.[r] ?? 0;
      const tableStart = rows.pageTableStarts[r]!;
      if (this.scores.length < kvLength) this.scores = new Float64Array(kvLength);
      const scores = this.scores;
      for (let h = 0; h < headCount; h++) {
        const qBase = r * qDim + h * headDim;
        const headOffset = Math.floor(h / group) * headDim;
        let max = Number.NEGATIVE_INFINITY;
        for (let t = kvStart; t < kvLength; t++) {
          const page = rows.pageTables[tableStart + Math.floor(t / layout.pageSize)]!;
          const k = kvOffset(layout, page, layer, 0, t % layout.pageSize) + headOffset;
          let dot = 0;
          for (let i = 0; i < headDim; i++) dot += q[qBase + i]! * half[arena[k + i]!]!;
          scores[t] = dot * scale;
          if (scores[t]! > max) max = scores[t]!;
        }
        let sum = 0;
        for (let t = kvStart; t < kvLength; t++) {
          scores[t] = Math.exp(scores[t]! - max);
          sum += scores[t]!;
        }
        const acc = this.accumulator(headDim);
        for (let t = kvStart; t < kvLength; t++) {
          const page = rows.pageTables[tableStart + Math.floor(t / layout.pageSize)]!;
          const v = kvOffset(layout, page, layer, 1, t % layout.pageSize) + headOffset;
          const p = scores[t]!;
          for (let i = 0; i < headDim; i++) acc[i] += p * half[arena[v + i]!]!;
        }
        for (let i = 0; i < headDim; i++) out[qBase + i] = acc[i]! / sum;
      }
    }
  }

  embed(out: Float32Array, tokens: Int32Array, w: WeightMatrix): void {
    for (let r = 0; r < tokens.length; r++) {
      const token = tokens[r]!;
      assert(token >= 0 && token < w.outDim, `token ${token} outside the vocabulary`);
      decodeWeights(w.data, w.dtype, token * w.inDim, w.inDim, out, r * w.inDim);
    }
  }
}
