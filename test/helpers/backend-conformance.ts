/**
 * One conformance suite for every Backend (as hono tests all its routers with one suite): each kernel against a
 * textbook f64 computation written as directly as possible (whole matrices dequantized, KV gathered into contiguous
 * rows, softmax in two passes), over edge shapes, every weight type, page sizes 1, 7 and 16, grouped-query heads and
 * both RoPE styles; and each kernel's batch invariance, bit for bit: a row computed alone equals the same row inside
 * any batch. `callCount`, when given, must grow in every test: the proof that the backend under test did the work.
 *
 * Tolerances are forward-error bounds for f32 arithmetic (u = 2^-24), so a backend that accumulates in f32 passes and
 * one that reorders or drops terms does not:
 * - matmul, a dot product of n terms summed in 16 lanes then a 4-level tree: |error| <= (ceil(n/16) + 5)·u·Σ|x_i·w_i|
 *   + u·|result| (Higham's bound for recursive summation, per lane, plus the tree and the final rounding).
 * - rmsNorm: a few roundings of products (the sum of squares is f64 or well-conditioned): 4u relative.
 * - swiglu: exp approximated to ~2 ulp, then an add, a divide and a multiply: 8u relative.
 * - rope: products with exact cos/sin tables in f64, rounded once: 2u relative to the largest input of the pair.
 * - attention: each output is a convex combination of V rows, so |error| <= 2e-5 · max|V|: f32 scores of headDim
 *   terms (|score| < ~15 here) carry ~(headDim/16 + 5)·u·|score| error, which exp turns into a relative weight error
 *   of ~1e-6, and the weighted sum of up to ~200 positions adds (kvLength/16 + 5)·u.
 * - embed: dequantization is exact in every format: same bits.
 * - matmuls (several products of one input in one call, with a bias or added into their output): each output the
 *   bits of matmul's, then the bias and the accumulation each as one f32 add — what the forward pass did when it added
 *   them in JavaScript. storeKv: each value rounded to f16 exactly as util/half.ts's f32ToF16 (NaN, infinities,
 *   subnormals and ties included) into the slots kvOffset names, nothing else in the arena changes.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Backend } from '../../src/compute/backend.js';
import { type KvArena, type KvLayout, kvOffset, makeKvLayout } from '../../src/kv/kv-layout.js';
import { blockSize, GGML_TYPE_CODES, type WeightDType } from '../../src/model/gguf-types.js';
import type { RopeStyle } from '../../src/model/model-config.js';
import { decodeWeights, encodeWeights } from '../../src/model/quant.js';
import type { WeightMatrix } from '../../src/model/weights.js';
import { f16ToF32, f32ToF16 } from '../../src/util/half.js';
import { SeededRandom } from '../../src/util/random.js';

export type KernelName = 'matmul' | 'matmuls' | 'attention' | 'rmsNorm' | 'rope' | 'swiglu' | 'embed' | 'storeKv';

export interface ConformanceTarget<B extends Backend> {
  name: string;
  make: () => B;
  /** kernel calls the backend itself counted (the native addon's counters); must grow in each test */
  callCount?: (backend: B, kernel: KernelName) => number;
  /** releases what make() took (the native backend's threads) */
  dispose?: (backend: B) => void;
}

const U = 2 ** -24;
export const DTYPES = Object.keys(GGML_TYPE_CODES) as readonly WeightDType[];

/** Row lengths to test a type on: edge lengths for the float types, one to a few whole blocks for block types. */
function rowLengths(dtype: WeightDType, edges: number[]): number[] {
  const size = blockSize(dtype);
  if (size === 1) return edges;
  return size === 32 ? [32, 64, 288] : [256, 512];
}

export function gaussian(random: SeededRandom, n: number, std = 1): Float32Array {
  return Float32Array.from({ length: n }, () => std * random.normal());
}

export function weightMatrix(random: SeededRandom, dtype: WeightDType, inDim: number, outDim: number): WeightMatrix {
  return {
    name: `w${inDim}x${outDim}`,
    dtype,
    inDim,
    outDim,
    data: encodeWeights(gaussian(random, inDim * outDim), dtype),
  };
}

export function assertSameBits(got: Float32Array, want: Float32Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: lengths`);
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) assert.fail(`${what}: element ${i} is ${got[i]}, expected exactly ${want[i]}`);
  }
}

function assertWithin(got: Float32Array, want: Float64Array, bound: (i: number) => number, what: string): void {
  for (let i = 0; i < want.length; i++) {
    const error = Math.abs(got[i]! - want[i]!);
    if (!(error <= bound(i)))
      assert.fail(`${what}: element ${i} is ${got[i]}, expected ${want[i]} ± ${bound(i)} (off by ${error})`);
  }
}

/** Runs `body` and checks the backend counted at least one call of `kernel` meanwhile. */
function counted<B extends Backend>(
  target: ConformanceTarget<B>,
  backend: B,
  kernel: KernelName,
  body: () => void,
): void {
  try {
    const before = target.callCount?.(backend, kernel);
    body();
    if (before !== undefined) {
      assert.ok(target.callCount!(backend, kernel) > before, `${target.name} did not run its own ${kernel} kernel`);
    }
  } finally {
    target.dispose?.(backend);
  }
}

// ---- textbook computations (f64) -------------------------------------------------------------------------------

function textbookMatmul(
  x: Float32Array,
  rowCount: number,
  w: WeightMatrix,
): { value: Float64Array; magnitude: Float64Array } {
  const dense = new Float32Array(w.inDim * w.outDim);
  decodeWeights(w.data, w.dtype, 0, w.inDim * w.outDim, dense);
  const value = new Float64Array(rowCount * w.outDim);
  const magnitude = new Float64Array(rowCount * w.outDim);
  for (let r = 0; r < rowCount; r++) {
    for (let o = 0; o < w.outDim; o++) {
      let sum = 0;
      let abs = 0;
      for (let i = 0; i < w.inDim; i++) {
        const p = x[r * w.inDim + i]! * dense[o * w.inDim + i]!;
        sum += p;
        abs += Math.abs(p);
      }
      value[r * w.outDim + o] = sum;
      magnitude[r * w.outDim + o] = abs;
    }
  }
  return { value, magnitude };
}

interface KvCase {
  layout: KvLayout;
  layer: number;
  headCount: number;
  kvHeadCount: number;
  headDim: number;
  arena: KvArena;
  kvLengths: Int32Array;
  /** row r attends over positions [kvStarts[r], kvLengths[r]) (a sliding window); 0 when absent */
  kvStarts?: Int32Array;
  pageTables: Int32Array;
  pageTableStarts: Int32Array;
}

function textbookAttention(q: Float32Array, c: KvCase): Float64Array {
  const { headCount, kvHeadCount, headDim, layout, layer } = c;
  const out = new Float64Array(c.kvLengths.length * headCount * headDim);
  for (let r = 0; r < c.kvLengths.length; r++) {
    const n = c.kvLengths[r]!;
    // gather this row's K and V into contiguous arrays
    const keys: Float32Array[] = [];
    const values: Float32Array[] = [];
    for (let t = c.kvStarts?.[r] ?? 0; t < n; t++) {
      const page = c.pageTables[c.pageTableStarts[r]! + Math.floor(t / layout.pageSize)]!;
      const k = kvOffset(layout, page, layer, 0, t % layout.pageSize);
      const v = kvOffset(layout, page, layer, 1, t % layout.pageSize);
      keys.push(Float32Array.from(c.arena.subarray(k, k + layout.kvDim), f16ToF32));
      values.push(Float32Array.from(c.arena.subarray(v, v + layout.kvDim), f16ToF32));
    }
    for (let h = 0; h < headCount; h++) {
      const kvh = Math.floor(h / (headCount / kvHeadCount)) * headDim;
      const qh = (r * headCount + h) * headDim;
      const scores = keys.map((k) => {
        let dot = 0;
        for (let i = 0; i < headDim; i++) dot += q[qh + i]! * k[kvh + i]!;
        return dot / Math.sqrt(headDim);
      });
      const max = Math.max(...scores);
      const weights = scores.map((s) => Math.exp(s - max));
      const total = weights.reduce((a, b) => a + b, 0);
      for (let i = 0; i < headDim; i++) {
        let sum = 0;
        for (let t = 0; t < values.length; t++) sum += weights[t]! * values[t]![kvh + i]!;
        out[qh + i] = sum / total;
      }
    }
  }
  return out;
}

// ---- cases ------------------------------------------------------------------------------------------------------

/** The largest |value| of an arena of f16 bits. */
function maxAbsHalf(arena: KvArena): number {
  return arena.reduce((m, h) => Math.max(m, Math.abs(f16ToF32(h))), 0);
}

/**
 * Values whose rounding to f16 every path must get the same: NaNs with payloads and signs, infinities, the overflow
 * edge (65,504 the largest half, 65,520 the first value that rounds to infinity), ties to even in normals and in
 * subnormals, the smallest subnormal's half-way point (2^-25), f32 subnormals, and both zeros.
 */
const ROUNDING_CASES = Float32Array.from([
  Number.NaN,
  -Number.NaN,
  new Float32Array(Uint32Array.of(0x7f800001).buffer)[0]!,
  new Float32Array(Uint32Array.of(0xffa5a5a5).buffer)[0]!,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  65504,
  65519.99,
  65520,
  -70000,
  1 + 2 ** -11,
  1 + 3 * 2 ** -11,
  -(1 + 2 ** -11 + 2 ** -20),
  2 ** -14,
  2 ** -14 - 2 ** -25,
  2 ** -25,
  2 ** -25 + 2 ** -40,
  -(3 * 2 ** -25),
  2 ** -24 * 1.5,
  1e-40,
  0,
  -0,
]);

/** A KV arena filled with noise and, per row, its own shuffled page table and length. */
export function kvCase(
  random: SeededRandom,
  shape: {
    headCount: number;
    kvHeadCount: number;
    headDim: number;
    pageSize: number;
    rowCount: number;
    kvLengthMax: number;
  },
): KvCase {
  const layout = makeKvLayout(2, shape.kvHeadCount * shape.headDim, shape.pageSize);
  const pagesPerRow = Math.ceil(shape.kvLengthMax / shape.pageSize);
  const pageCount = pagesPerRow + 3;
  const kvLengths = Int32Array.from({ length: shape.rowCount }, () => 1 + random.nextInt(shape.kvLengthMax));
  const tables: number[] = [];
  const starts: number[] = [];
  for (let r = 0; r < shape.rowCount; r++) {
    starts.push(tables.length);
    const pages = Array.from({ length: pageCount }, (_, i) => i);
    for (let i = pages.length - 1; i > 0; i--) {
      const j = random.nextInt(i + 1);
      [pages[i], pages[j]] = [pages[j]!, pages[i]!];
    }
    tables.push(...pages.slice(0, pagesPerRow));
  }
  return {
    layout,
    layer: 1,
    headCount: shape.headCount,
    kvHeadCount: shape.kvHeadCount,
    headDim: shape.headDim,
    arena: Uint16Array.from(gaussian(random, pageCount * layout.valuesPerPage), f32ToF16),
    kvLengths,
    pageTables: Int32Array.from(tables),
    pageTableStarts: Int32Array.from(starts),
  };
}

/** A prefill chunk: `rowCount` consecutive positions from `start` of one sequence, every row on the same pages. */
function sequenceCase(
  random: SeededRandom,
  shape: { headCount: number; kvHeadCount: number; headDim: number; pageSize: number },
  start: number,
  rowCount: number,
): KvCase {
  const one = kvCase(random, { ...shape, rowCount: 1, kvLengthMax: start + rowCount });
  return {
    ...one,
    kvLengths: Int32Array.from({ length: rowCount }, (_, r) => start + r + 1),
    pageTableStarts: new Int32Array(rowCount),
  };
}

export function attentionOf(backend: Backend, q: Float32Array, c: KvCase, rows: number[]): Float32Array {
  const qDim = c.headCount * c.headDim;
  const qs = new Float32Array(rows.length * qDim);
  rows.forEach((r, j) => {
    qs.set(q.subarray(r * qDim, (r + 1) * qDim), j * qDim);
  });
  const out = new Float32Array(rows.length * qDim);
  backend.attention(
    out,
    qs,
    {
      rowCount: rows.length,
      kvLengths: Int32Array.from(rows, (r) => c.kvLengths[r]!),
      ...(c.kvStarts === undefined ? {} : { kvStarts: Int32Array.from(rows, (r) => c.kvStarts![r]!) }),
      pageTables: c.pageTables,
      pageTableStarts: Int32Array.from(rows, (r) => c.pageTableStarts[r]!),
    },
    { layer: c.layer, headCount: c.headCount, kvHeadCount: c.kvHeadCount, headDim: c.headDim, layout: c.layout },
    c.arena,
  );
  return out;
}

/**
 * Every row of `c` in one call, against f64 (outputs are convex combinations of V rows: 2e-5 of the largest |V|),
 * then each row of `alone` in a call of its own, which must give that row's bits. Returns the batched output.
 */
function checkAttention(
  backend: Backend,
  q: Float32Array,
  c: KvCase,
  alone: readonly number[],
  what: string,
): Float32Array {
  const rows = Array.from({ length: c.kvLengths.length }, (_, r) => r);
  const got = attentionOf(backend, q, c, rows);
  const maxV = maxAbsHalf(c.arena);
  assertWithin(got, textbookAttention(q, c), () => 2e-5 * maxV, what);
  const qDim = c.headCount * c.headDim;
  for (const r of alone) {
    assertSameBits(attentionOf(backend, q, c, [r]), got.subarray(r * qDim, (r + 1) * qDim), `${what}: row ${r} alone`);
  }
  return got;
}

// ---- the suite --------------------------------------------------------------------------------------------------

export function describeBackendConformance<B extends Backend>(target: ConformanceTarget<B>): void {
  describe(`backend conformance: ${target.name}`, () => {
    test('matmul over every weight type and edge shape matches f64, each row the same bits alone or batched', () => {
      const backend = target.make();
      const random = new SeededRandom(1);
      counted(target, backend, 'matmul', () => {
        for (const dtype of DTYPES) {
          const inDims = rowLengths(dtype, [1, 31, 32, 33, 257]);
          for (const inDim of inDims) {
            for (const outDim of [1, 7, 33]) {
              const w = weightMatrix(random, dtype, inDim, outDim);
              const x = gaussian(random, 17 * inDim);
              const want = textbookMatmul(x, 17, w);
              const batched = new Float32Array(17 * outDim);
              backend.matmul(batched, x, 17, w);
              const what = `${dtype} ${inDim}→${outDim}`;
              const slack = (Math.ceil(inDim / 16) + 5) * U;
              assertWithin(batched, want.value, (i) => slack * want.magnitude[i]! + U * Math.abs(want.value[i]!), what);
              for (const rowCount of [1, 2, 5, 16]) {
                for (const first of [0, 17 - rowCount]) {
                  const part = new Float32Array(rowCount * outDim);
                  backend.matmul(part, x.subarray(first * inDim), rowCount, w);
                  assertSameBits(
                    part,
                    batched.subarray(first * outDim, (first + rowCount) * outDim),
                    `${what} rows ${first}+${rowCount}`,
                  );
                }
              }
            }
          }
        }
      });
    });

    test('matmuls: every part the bits of its own matmul, then + bias and += out as f32 adds, parts of any width', () => {
      const backend = target.make();
      const random = new SeededRandom(7);
      counted(target, backend, 'matmuls', () => {
        for (const dtype of ['f32', 'f16', 'q8_0'] as const) {
          for (const rowCount of [1, 5, 70]) {
            const inDim = 64;
            // widths that split across the native backend's tasks and tiles unevenly
            const ws = [7, 33, 100].map((outDim) => weightMatrix(random, dtype, inDim, outDim));
            const x = gaussian(random, rowCount * inDim);
            const plain = ws.map((w) => {
              const out = new Float32Array(rowCount * w.outDim);
              backend.matmul(out, x, rowCount, w);
              return out;
            });
            const bias = gaussian(random, ws[1]!.outDim);
            const start = gaussian(random, rowCount * ws[2]!.outDim);
            const outs = ws.map((w) => new Float32Array(rowCount * w.outDim).fill(Number.NaN));
            outs[2]!.set(start);
            backend.matmuls(x, rowCount, [
              { out: outs[0]!, w: ws[0]! },
              { out: outs[1]!, w: ws[1]!, bias },
              { out: outs[2]!, w: ws[2]!, accumulate: true },
            ]);
            const what = `${dtype} rows ${rowCount}`;
            assertSameBits(outs[0]!, plain[0]!, `${what}: plain part`);
            const biased = plain[1]!.map((value, i) => value + bias[i % bias.length]!);
            assertSameBits(outs[1]!, biased, `${what}: part with a bias`);
            assertSameBits(
              outs[2]!,
              plain[2]!.map((value, i) => start[i]! + value),
              `${what}: accumulated part`,
            );
            // one part, bias and accumulate together: the bias first, then the add into out
            const both = start.slice(0, rowCount * ws[1]!.outDim);
            backend.matmuls(x, rowCount, [{ out: both, w: ws[1]!, bias, accumulate: true }]);
            const want = biased.map((value, i) => start[i]! + value);
            assertSameBits(both, want, `${what}: bias and accumulate`);
          }
        }
      });
    });

    test('storeKv writes each row into the slots of its position and page, and nothing else', () => {
      const backend = target.make();
      const random = new SeededRandom(8);
      counted(target, backend, 'storeKv', () => {
        for (const pageSize of [1, 7, 16]) {
          const layout = makeKvLayout(3, 24, pageSize);
          const pageCount = 9;
          const arena = Uint16Array.from(gaussian(random, pageCount * layout.valuesPerPage), f32ToF16);
          const before = arena.slice();
          // two sequences with shuffled tables; rows: a run of one, then a single row of the other
          const tables = [8, 2, 5, 0, 3, 1, 7, 4, 6];
          const rows = {
            rowCount: 4,
            positions: Int32Array.of(pageSize - 1, pageSize, pageSize + 1, 2 * pageSize),
            pageTables: Int32Array.from(tables),
            pageTableStarts: Int32Array.of(0, 0, 0, 4),
          };
          const k = gaussian(random, 4 * 24, 4);
          const v = gaussian(random, 4 * 24, 2 ** -12);
          k.set(ROUNDING_CASES);
          const want = before.slice();
          for (let r = 0; r < 4; r++) {
            const pos = rows.positions[r]!;
            const page = tables[rows.pageTableStarts[r]! + Math.floor(pos / pageSize)]!;
            const halves = (x: Float32Array) => Uint16Array.from(x.subarray(r * 24, (r + 1) * 24), f32ToF16);
            want.set(halves(k), kvOffset(layout, page, 2, 0, pos % pageSize));
            want.set(halves(v), kvOffset(layout, page, 2, 1, pos % pageSize));
          }
          backend.storeKv(k, v, rows, 2, layout, arena);
          assert.deepEqual(arena, want, `storeKv page size ${pageSize}`);
        }
      });
    });

    test('rmsNorm matches f64 within 4 ulp, each row the same bits alone or batched', () => {
      const backend = target.make();
      const random = new SeededRandom(2);
      counted(target, backend, 'rmsNorm', () => {
        for (const dim of [1, 7, 64, 257, 576]) {
          const x = gaussian(random, 17 * dim, 3);
          const weight = gaussian(random, dim);
          const out = new Float32Array(17 * dim);
          backend.rmsNorm(out, x, 17, weight, 1e-5);
          const want = new Float64Array(17 * dim);
          for (let r = 0; r < 17; r++) {
            let sum = 0;
            for (let i = 0; i < dim; i++) sum += x[r * dim + i]! ** 2;
            const scale = 1 / Math.sqrt(sum / dim + 1e-5);
            for (let i = 0; i < dim; i++) want[r * dim + i] = x[r * dim + i]! * scale * weight[i]!;
          }
          assertWithin(out, want, (i) => 4 * U * Math.abs(want[i]!) + 1e-30, `rmsNorm dim ${dim}`);
          const alone = new Float32Array(dim);
          backend.rmsNorm(alone, x.subarray(9 * dim), 1, weight, 1e-5);
          assertSameBits(alone, out.subarray(9 * dim, 10 * dim), `rmsNorm dim ${dim} row 9 alone`);
        }
      });
    });

    test('rope (adjacent and neox, partial rotation, far positions) matches f64, rows independent', () => {
      const backend = target.make();
      const random = new SeededRandom(3);
      counted(target, backend, 'rope', () => {
        const shapes = [
          { headCount: 4, headDim: 8, ropeDim: 8 },
          { headCount: 3, headDim: 64, ropeDim: 64 },
          { headCount: 2, headDim: 32, ropeDim: 16 },
        ];
        for (const style of ['adjacent', 'neox'] as RopeStyle[]) {
          for (const theta of [10_000, 1_000_000]) {
            for (const { headCount, headDim, ropeDim } of shapes) {
              const rowCount = 9;
              const width = headCount * headDim;
              const x = gaussian(random, rowCount * width);
              const positions = Int32Array.from({ length: rowCount }, (_, r) => (r === 0 ? 0 : random.nextInt(6000)));
              const got = x.slice();
              backend.rope(got, rowCount, headCount, headDim, ropeDim, positions, theta, style);
              const want = Float64Array.from(x);
              const bound = new Float64Array(x.length);
              const half = ropeDim / 2;
              for (let r = 0; r < rowCount; r++) {
                for (let h = 0; h < headCount; h++) {
                  const base = r * width + h * headDim;
                  for (let i = 0; i < half; i++) {
                    const angle = positions[r]! * theta ** (-(2 * i) / ropeDim);
                    const a = style === 'adjacent' ? base + 2 * i : base + i;
                    const b = style === 'adjacent' ? a + 1 : a + half;
                    want[a] = x[a]! * Math.cos(angle) - x[b]! * Math.sin(angle);
                    want[b] = x[a]! * Math.sin(angle) + x[b]! * Math.cos(angle);
                    bound[a] = bound[b] = 2 * U * Math.max(Math.abs(x[a]!), Math.abs(x[b]!));
                  }
                }
              }
              const what = `rope ${style} θ=${theta} ${headCount}×${headDim}/${ropeDim}`;
              assertWithin(got, want, (i) => bound[i]!, what);
              const alone = x.slice(4 * width, 5 * width);
              backend.rope(alone, 1, headCount, headDim, ropeDim, positions.subarray(4, 5), theta, style);
              assertSameBits(alone, got.subarray(4 * width, 5 * width), `${what} row 4 alone`);
            }
          }
        }
      });
    });

    test('swiglu matches f64 within 8 ulp over a wide range, element by element', () => {
      const backend = target.make();
      const random = new SeededRandom(4);
      counted(target, backend, 'swiglu', () => {
        for (const n of [1, 15, 16, 17, 1000]) {
          const gate = Float32Array.from({ length: n }, () => (random.next() - 0.5) * 60);
          const up = gaussian(random, n);
          const got = gate.slice();
          backend.swiglu(got, up, n);
          const want = Float64Array.from(gate, (g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
          assertWithin(got, want, (i) => 8 * U * Math.abs(want[i]!) + 1e-37, `swiglu n=${n}`);
          if (n > 3) {
            const tail = gate.slice(3);
            backend.swiglu(tail, up.subarray(3), n - 3);
            assertSameBits(tail, got.subarray(3), `swiglu n=${n} from element 3`);
          }
        }
      });
    });

    test('attention over paged KV (page sizes 1, 7, 16; GQA groups 1, 2, 4) matches f64, each row alone the same bits', () => {
      const backend = target.make();
      const random = new SeededRandom(5);
      counted(target, backend, 'attention', () => {
        const shapes = [
          { headCount: 4, kvHeadCount: 4, headDim: 8 },
          { headCount: 4, kvHeadCount: 2, headDim: 16 },
          { headCount: 4, kvHeadCount: 1, headDim: 20 },
          { headCount: 3, kvHeadCount: 1, headDim: 64 },
        ];
        for (const pageSize of [1, 7, 16]) {
          for (const shape of shapes) {
            const rowCount = 1 + random.nextInt(17);
            const c = kvCase(random, { ...shape, pageSize, rowCount, kvLengthMax: 200 });
            const q = gaussian(random, rowCount * shape.headCount * shape.headDim, 1.5);
            const what = `attention page ${pageSize} heads ${shape.headCount}/${shape.kvHeadCount}×${shape.headDim} rows ${rowCount}`;
            checkAttention(backend, q, c, [rowCount - 1], what);
          }
        }
      });
    });

    test('attention of a prefill chunk (rows of one sequence sharing each K/V block) gives each row its bits alone', () => {
      const backend = target.make();
      const random = new SeededRandom(11);
      counted(target, backend, 'attention', () => {
        // head sizes of 1, 2, 3, 4 and 5 chunks of 16 (5: known only at run time), GQA groups 1, 3, 4 and 6 (more
        // heads than one task takes); 37 rows cross tiles and 64-position blocks, and end at different positions
        // inside a block; windows: none, one first position for all rows (they still share tiles), and a sliding
        // window of 50 (each row its own first position)
        const shapes = [
          { headCount: 4, kvHeadCount: 4, headDim: 8 },
          { headCount: 9, kvHeadCount: 3, headDim: 64 },
          { headCount: 8, kvHeadCount: 2, headDim: 80 },
          { headCount: 4, kvHeadCount: 1, headDim: 20 },
          { headCount: 12, kvHeadCount: 2, headDim: 48 },
        ];
        const windows = ['none', 'shared', 'sliding'] as const;
        for (const pageSize of [7, 16]) {
          for (const [i, shape] of shapes.entries()) {
            const start = 40 + random.nextInt(60);
            const window = windows[(i + (pageSize === 16 ? 1 : 0)) % windows.length]!;
            const c = sequenceCase(random, { ...shape, pageSize }, start, 37);
            if (window === 'shared') c.kvStarts = new Int32Array(37).fill(13);
            if (window === 'sliding') c.kvStarts = Int32Array.from(c.kvLengths, (n) => Math.max(0, n - 50));
            const q = gaussian(random, 37 * shape.headCount * shape.headDim, 1.5);
            const what = `attention chunk page ${pageSize} heads ${shape.headCount}/${shape.kvHeadCount}×${shape.headDim} window ${window}`;
            const got = checkAttention(backend, q, c, [0, 5, 15, 16, 17, 36], what);
            const qDim = shape.headCount * shape.headDim;
            assertSameBits(
              attentionOf(
                backend,
                q,
                c,
                Array.from({ length: 21 }, (_, i) => 3 + i),
              ),
              got.subarray(3 * qDim, 24 * qDim),
              `${what}: rows 3..23`,
            );
          }
        }
      });
    });

    test('attention over rows longer than a span (128 positions) matches f64, each row alone the same bits', () => {
      const backend = target.make();
      const random = new SeededRandom(12);
      counted(target, backend, 'attention', () => {
        // a decode step's shape (135m: 9 heads on 3 KV heads) and a group of 1 with a run-time head size; lengths of
        // 1 to 5 spans, on and just past a span's end, one sliding window. Batched, the rows are enough tasks to walk
        // each row's spans in one task; alone, a native backend splits a long row's spans over its threads.
        const shapes = [
          { headCount: 9, kvHeadCount: 3, headDim: 64 },
          { headCount: 2, kvHeadCount: 2, headDim: 80 },
        ];
        for (const shape of shapes) {
          const c = kvCase(random, { ...shape, pageSize: 16, rowCount: 8, kvLengthMax: 600 });
          c.kvLengths.set([600, 128, 129, 256, 257, 1, 383, 500]);
          c.kvStarts = Int32Array.of(0, 0, 0, 0, 0, 0, 0, 200);
          const q = gaussian(random, 8 * shape.headCount * shape.headDim, 1.5);
          const what = `attention long rows heads ${shape.headCount}/${shape.kvHeadCount}×${shape.headDim}`;
          const every = Array.from({ length: 8 }, (_, r) => r);
          checkAttention(backend, q, c, every, what);
        }
      });
    });

    test('embed of every weight type gives the dequantized rows exactly', () => {
      const backend = target.make();
      const random = new SeededRandom(6);
      counted(target, backend, 'embed', () => {
        for (const dtype of DTYPES) {
          for (const inDim of rowLengths(dtype, [1, 33, 96])) {
            const w = weightMatrix(random, dtype, inDim, 50);
            const tokens = Int32Array.from([0, 49, 7, 7, 23]);
            const got = new Float32Array(tokens.length * inDim);
            backend.embed(got, tokens, w);
            const want = new Float32Array(tokens.length * inDim);
            tokens.forEach((t, r) => {
              decodeWeights(w.data, w.dtype, t * inDim, inDim, want, r * inDim);
            });
            assertSameBits(got, want, `embed ${dtype} ${inDim}`);
          }
        }
      });
    });
  });
}
