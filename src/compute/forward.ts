/**
 * The batched forward pass: one call runs new tokens of several sequences (prefill chunks and decode steps alike),
 * writes their K/V into each sequence's own pages and attends over them. Reads top to bottom, one step per line.
 *
 * Before a sequence joins the batch its page table passes the pool's I3 check; a sequence that fails is left out of
 * the batch and reported with its error, so one bad sequence never affects another.
 */
import type { PagePool } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import type { ModelConfig } from '../model/model-config.js';
import type { ModelWeights, WeightMatrix } from '../model/weights.js';
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { type KeyCount, keyCounter } from './attended-keys.js';
import type { AttentionRows, Backend, KvRows, RopeScaling } from './backend.js';
import { ForwardScratch } from './forward-scratch.js';

export interface ForwardModel {
  config: ModelConfig;
  weights: ModelWeights;
}

export interface ForwardInput {
  table: PageTable;
  /** new tokens, at positions table.writtenTokens, table.writtenTokens + 1, ... */
  tokens: readonly number[];
  /** which rows' logits to return */
  logits: 'last' | 'all' | 'none';
}

/** The attention part of a run: its time and the cached keys it read (attended-keys.ts). */
export interface AttentionWork {
  ms: number;
  keys: number;
}

export type ForwardOutput =
  | { ok: true; logits: Float32Array /* (rows wanted, vocabSize) */ }
  | { ok: false; error: KvfenceError };

export class ForwardPass {
  /** RoPE scaling of global and sliding-window layers (undefined: plain rotation), built once so tables are reused */
  private readonly ropeScaling: RopeScaling | undefined;
  private readonly slidingRopeScaling: RopeScaling | undefined;
  /** activation buffers reused by every call (one call at a time: run is synchronous) */
  private readonly scratch = new ForwardScratch();
  /** keys read by n new tokens from a position, over all layers */
  readonly keysOf: KeyCount;
  /** the last run's attention: what a prompt's position adds to its cost (prefill-pace.ts learns it from this) */
  lastAttention: AttentionWork = { ms: 0, keys: 0 };

  constructor(
    readonly model: ForwardModel,
    readonly backend: Backend,
    readonly pool: PagePool,
  ) {
    const c = model.config;
    assert(
      pool.layout.layerCount === c.layerCount && pool.layout.kvDim === c.kvHeadCount * c.headDim,
      'KV layout does not fit the model',
    );
    const factors = model.weights.ropeFactors;
    const scaling = (freqScale: number) =>
      freqScale === 1 && c.ropeAttnFactor === 1 && factors === undefined
        ? undefined
        : { freqScale, attnFactor: c.ropeAttnFactor, factors };
    this.ropeScaling = scaling(c.ropeFreqScale);
    // llama.cpp rotates sliding-window layers unscaled (rope_freq_scale_train_swa = 1)
    this.slidingRopeScaling = scaling(1);
    this.keysOf = keyCounter(c);
  }

  run(inputs: readonly ForwardInput[]): ForwardOutput[] {
    this.lastAttention = { ms: 0, keys: 0 };
    const outputs: (ForwardOutput | undefined)[] = inputs.map((input) => this.admit(input));
    const live = inputs.map((_, i) => i).filter((i) => outputs[i] === undefined);
    if (live.length > 0) {
      const batch = live.map((i) => inputs[i]!);
      const logits = this.runBatch(batch);
      this.lastAttention.keys = batch.reduce(
        (n, { table, tokens }) => n + this.keysOf(table.writtenTokens - tokens.length, tokens.length),
        0,
      );
      live.forEach((i, j) => {
        outputs[i] = { ok: true, logits: logits[j]! };
      });
    }
    return outputs.map((o) => o!);
  }

  /** Checks a sequence may read what it will read (I3) and claims the slots it will write; undefined when admitted. */
  private admit(input: ForwardInput): ForwardOutput | undefined {
    const { table, tokens } = input;
    const start = table.writtenTokens;
    const end = start + tokens.length;
    assert(tokens.length > 0, 'a forward input needs at least one token');
    if (end > this.model.config.contextLength) {
      return {
        ok: false,
        error: new KvfenceError(
          'context_length_exceeded',
          `position ${end} exceeds the model context ${this.model.config.contextLength}`,
        ),
      };
    }
    assert(end <= table.pages.length * this.pool.layout.pageSize, 'tokens beyond the granted pages');
    try {
      this.pool.checkReadable(table, start);
      this.pool.markWritten(table, end);
    } catch (error) {
      if (error instanceof KvfenceError) return { ok: false, error };
      throw error;
    }
    return undefined;
  }

  private runBatch(inputs: readonly ForwardInput[]): Float32Array[] {
    const { config: c, weights: w } = this.model;
    const { backend, pool } = this;
    const layout = pool.layout;
    const qDim = c.headCount * c.headDim;
    const kvDim = c.kvHeadCount * c.headDim;

    // Rows: one per new token, in input order.
    const rowCount = inputs.reduce((n, input) => n + input.tokens.length, 0);
    const tokens = new Int32Array(rowCount);
    const positions = new Int32Array(rowCount);
    const rowTable = new Int32Array(rowCount); // input index of each row
    const tables: number[] = [];
    const tableStarts: number[] = [];
    let r = 0;
    inputs.forEach((input, i) => {
      tableStarts.push(tables.length);
      tables.push(...input.table.pages);
      const start = input.table.writtenTokens - input.tokens.length;
      for (let t = 0; t < input.tokens.length; t++, r++) {
        tokens[r] = input.tokens[t]!;
        positions[r] = start + t;
        rowTable[r] = i;
      }
    });
    const rows: AttentionRows = {
      rowCount,
      kvLengths: positions.map((p) => p + 1),
      pageTables: Int32Array.from(tables),
      pageTableStarts: rowTable.map((i) => tableStarts[i]!),
    };
    // a sliding-window layer's row sees its last slidingWindow positions, itself included (llama.cpp's SWA mask)
    const slidingRows: AttentionRows = {
      ...rows,
      kvStarts: positions.map((p) => Math.max(0, p + 1 - c.slidingWindow)),
    };
    // gemma3 27B scales q·k by another factor than 1/√headDim; the backends' attention applies 1/√headDim
    const qScale = c.attentionScale * Math.sqrt(c.headDim);

    const kvRows: KvRows = { rowCount, positions, pageTables: rows.pageTables, pageTableStarts: rows.pageTableStarts };

    // Reused buffers (ForwardScratch): each is written whole before it is read, below — x by embed, xb by rmsNorm or
    // the wo/wDown product, q/k/v/gate/up by their products, att by attention, which all write every element of
    // their output — so nothing an earlier call left in them is ever read.
    const { scratch } = this;
    const x = scratch.take('x', rowCount * c.dim); // (rows, dim) residual stream
    const xb = scratch.take('xb', rowCount * c.dim); // (rows, dim) normed
    const q = scratch.take('q', rowCount * qDim); // (rows, qDim)
    const k = scratch.take('k', rowCount * kvDim); // (rows, kvDim)
    const v = scratch.take('v', rowCount * kvDim); // (rows, kvDim)
    const att = scratch.take('att', rowCount * qDim); // (rows, qDim)
    const gate = scratch.take('gate', rowCount * c.ffnDim); // (rows, ffnDim)
    const up = scratch.take('up', rowCount * c.ffnDim); // (rows, ffnDim)

    backend.embed(x, tokens, w.tokenEmbedding);
    if (c.embeddingScale !== 1) scaleInPlace(x, c.embeddingScale);
    for (let l = 0; l < c.layerCount; l++) {
      const L = w.layers[l]!;
      // attention block
      backend.rmsNorm(xb, x, rowCount, L.attnNorm, c.normEps);
      backend.matmuls(xb, rowCount, [
        { out: q, w: L.wq, bias: L.bq },
        { out: k, w: L.wk, bias: L.bk },
        { out: v, w: L.wv, bias: L.bv },
      ]);
      // qwen3, gemma3: each head of Q and K RMS-normalized before the rotation
      if (L.qNorm !== undefined) backend.rmsNorm(q, q, rowCount * c.headCount, L.qNorm, c.normEps);
      if (L.kNorm !== undefined) backend.rmsNorm(k, k, rowCount * c.kvHeadCount, L.kNorm, c.normEps);
      const sliding = c.slidingLayers[l] === true;
      const theta = sliding ? c.ropeThetaSliding : c.ropeTheta;
      const scaling = sliding ? this.slidingRopeScaling : this.ropeScaling;
      backend.rope(q, rowCount, c.headCount, c.headDim, c.ropeDim, positions, theta, c.ropeStyle, scaling);
      backend.rope(k, rowCount, c.kvHeadCount, c.headDim, c.ropeDim, positions, theta, c.ropeStyle, scaling);
      if (Math.abs(qScale - 1) > 1e-9) scaleInPlace(q, qScale);
      backend.storeKv(k, v, kvRows, l, layout, pool.arena);
      const shape = { layer: l, headCount: c.headCount, kvHeadCount: c.kvHeadCount, headDim: c.headDim, layout };
      const attentionStart = performance.now();
      backend.attention(att, q, sliding ? slidingRows : rows, shape, pool.arena);
      this.lastAttention.ms += performance.now() - attentionStart;
      this.addResidual(x, att, rowCount, L.wo, L.postAttnNorm, xb);
      // feed-forward block
      backend.rmsNorm(xb, x, rowCount, L.ffnNorm, c.normEps);
      backend.matmuls(xb, rowCount, [
        { out: gate, w: L.wGate },
        { out: up, w: L.wUp },
      ]);
      if (c.ffnActivation === 'gelu') backend.geglu(gate, up, rowCount * c.ffnDim);
      else backend.swiglu(gate, up, rowCount * c.ffnDim);
      this.addResidual(x, gate, rowCount, L.wDown, L.postFfnNorm, xb);
    }

    // logits for the rows each input asked for
    const wanted: number[] = [];
    const wantedPerInput: number[] = [];
    r = 0;
    for (const input of inputs) {
      const n = input.tokens.length;
      const first = input.logits === 'all' ? 0 : input.logits === 'last' ? n - 1 : n;
      for (let t = first; t < n; t++) wanted.push(r + t);
      wantedPerInput.push(n - first);
      r += n;
    }
    // picked: every row set from x; normed and logits: written whole by their kernels; logits are copied out below
    const picked = scratch.take('picked', wanted.length * c.dim);
    wanted.forEach((row, j) => {
      picked.set(x.subarray(row * c.dim, (row + 1) * c.dim), j * c.dim);
    });
    const normed = scratch.take('normed', wanted.length * c.dim);
    backend.rmsNorm(normed, picked, wanted.length, w.outputNorm, c.normEps);
    const logits = scratch.take('logits', wanted.length * c.vocabSize);
    backend.matmul(logits, normed, wanted.length, w.output);
    if (c.finalLogitSoftcap > 0) softcapInPlace(logits, c.finalLogitSoftcap);
    let offset = 0;
    return wantedPerInput.map((n) => {
      const part = logits.slice(offset * c.vocabSize, (offset + n) * c.vocabSize);
      offset += n;
      return part;
    });
  }

  /**
   * x += input · wᵀ, the residual add: fused into the product (the kernel adds in f32, the same bits as adding in
   * JavaScript's f64 and storing to f32). A post-norm (gemma3) sits between the product and the add, so there the
   * product goes through xb (written whole by the product) and the add stays here.
   */
  private addResidual(
    x: Float32Array,
    input: Float32Array,
    rowCount: number,
    w: WeightMatrix,
    postNorm: Float32Array | undefined,
    xb: Float32Array,
  ): void {
    const { backend } = this;
    if (postNorm === undefined) {
      backend.matmuls(input, rowCount, [{ out: x, w, accumulate: true }]);
      return;
    }
    backend.matmul(xb, input, rowCount, w);
    backend.rmsNorm(xb, xb, rowCount, postNorm, this.model.config.normEps);
    addInPlace(x, xb, rowCount * this.model.config.dim);
  }
}

function scaleInPlace(x: Float32Array, s: number): void {
  for (let i = 0; i < x.length; i++) x[i] *= s;
}

function softcapInPlace(x: Float32Array, cap: number): void {
  for (let i = 0; i < x.length; i++) x[i] = cap * Math.tanh(x[i]! / cap);
}

function addInPlace(x: Float32Array, y: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) x[i] += y[i]!;
}
