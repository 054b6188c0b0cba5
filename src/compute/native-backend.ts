/**
 * The native backend: the same kernels as the reference backend, in C++ with SIMD (AVX-512, AVX2 or portable, chosen
 * at load from the CPU) over a pool of persistent threads. The addon is build/Release/kvfence_native.node, built by
 * `npm install` (scripts/build-native.mjs); native/ holds its source and docs/native.md how it works.
 *
 * The addon validates every argument (lengths, shapes, page indices against the arena) and throws on a bad call;
 * this wrapper only translates the Backend interface into its flat argument lists. `callCounts` comes from the addon
 * itself, so a test can prove the native kernels ran rather than a fallback.
 */
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { KvArena, KvLayout } from '../kv/kv-layout.js';
import { GGML_TYPE_CODES } from '../model/gguf-types.js';
import type { RopeStyle } from '../model/model-config.js';
import type { WeightMatrix } from '../model/weights.js';
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
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

/** Where `npm install` puts the addon, from dist/src/compute/. */
export const DEFAULT_ADDON_PATH = fileURLToPath(new URL('../../../build/Release/kvfence_native.node', import.meta.url));
const ADDON_ABI_VERSION = 13;
export const NATIVE_THREAD_COUNT_MAX = 256;

export type NativeOp =
  | 'matmul'
  | 'matmuls'
  | 'attention'
  | 'attentionSplit'
  | 'rmsNorm'
  | 'rope'
  | 'swiglu'
  | 'embed'
  | 'storeKv'
  | 'triad';
export type NativeIsa = 'avx512' | 'avx2' | 'portable';

/** The addon's Context class (native/src/addon.cc), argument for argument. */
interface NativeContext {
  readonly isa: NativeIsa;
  readonly supportedIsas: NativeIsa[];
  readonly threadCount: number;
  readonly q8Activations: boolean;
  matmul(
    out: Float32Array,
    x: Float32Array,
    rowCount: number,
    w: WeightMatrix['data'],
    type: number,
    inDim: number,
    outDim: number,
  ): void;
  /** parts: six entries per product: out, weight data, type code, outDim, bias or null, accumulate 0/1 */
  matmuls(x: Float32Array, rowCount: number, inDim: number, parts: unknown[]): void;
  storeKv(
    k: Float32Array,
    v: Float32Array,
    rowCount: number,
    positions: Int32Array,
    pageTables: Int32Array,
    pageTableStarts: Int32Array,
    layer: number,
    layerCount: number,
    pageSize: number,
    kvDim: number,
    valuesPerPage: number,
    arena: KvArena,
  ): void;
  attention(
    out: Float32Array,
    q: Float32Array,
    rowCount: number,
    kvLengths: Int32Array,
    pageTables: Int32Array,
    pageTableStarts: Int32Array,
    layer: number,
    layerCount: number,
    headCount: number,
    kvHeadCount: number,
    headDim: number,
    pageSize: number,
    kvDim: number,
    valuesPerPage: number,
    arena: KvArena,
    kvStarts: Int32Array,
  ): void;
  rmsNorm(out: Float32Array, x: Float32Array, rowCount: number, weight: Float32Array, eps: number): void;
  rope(
    x: Float32Array,
    rowCount: number,
    headCount: number,
    headDim: number,
    ropeDim: number,
    positions: Int32Array,
    cosSin: Float64Array,
    tablePositions: number,
    neox: number,
  ): void;
  swiglu(gate: Float32Array, up: Float32Array, n: number): void;
  embed(
    out: Float32Array,
    tokens: Int32Array,
    w: WeightMatrix['data'],
    type: number,
    inDim: number,
    outDim: number,
  ): void;
  triad(a: Float32Array, b: Float32Array, c: Float32Array, s: number): void;
  callCounts(): Record<NativeOp, number>;
  setIsa(name: NativeIsa): void;
  close(): void;
}

export interface NativeAddon {
  Context: new (threadCount: number, q8Activations?: boolean) => NativeContext;
  /** madvise(MADV_HUGEPAGE) over the buffer's 2 MiB-aligned interior; the bytes advised (0: none, or no THP) */
  adviseHugePages(buffer: ArrayBuffer): number;
  /**
   * XXH3 (64-bit, seed 0; native/src/xxh3.cc; the transfer's page checksum, transfer/page-checksum.ts), its long-input
   * loop in the form `isa` names (one of `xxh3Isas`; tests compare them), else the best this CPU runs
   */
  xxh3(bytes: Uint8Array, isa?: string): bigint;
  /** copies `source` into `destination` (same length, not overlapping) and returns the XXH3 of what it wrote */
  xxh3Copy(source: Uint8Array, destination: Uint8Array, isa?: string): bigint;
  /** the forms of XXH3's long-input loop this CPU runs, best first (`portable` always last) */
  xxh3Isas: readonly string[];
  /** AES-256-GCM through node's OpenSSL, over caller-owned buffers (native/src/aead.cc; used through wire/frame-aead.ts) */
  Gcm: new (
    key: Uint8Array,
    seal: boolean,
  ) => NativeAead;
  /** AEGIS-256X4 through the vendored libaegis, the same calls (throws where `aegis256x4Runs` is false) */
  Aegis256x4: new (
    key: Uint8Array,
    seal: boolean,
  ) => NativeAead;
  /** whether this CPU runs AEGIS-256X4 (x86: AES-NI and AVX) */
  aegis256x4Runs: boolean;
  /** src's Q5_0 blocks into dst as Q8_0 blocks of the same values (src/model/widen-q5-0.ts, whose loop it runs) */
  widenQ5_0(src: Uint8Array, dst: Uint8Array): void;
  /** a second descriptor for the same open socket (close-on-exec); throws with errno's text */
  dupFd(fd: number): number;
  abiVersion: number;
}

/**
 * The addon's Gcm and Aegis256x4 classes (native/src/aead.cc): one direction's AEAD, a frame at a time. AEGIS holds
 * back a partial block (under 64 bytes) of what `update` is given and writes it just before the next call's `at`, or
 * before `end` at the finish: one frame's calls write one contiguous run of one output.
 */
export interface NativeAead {
  start(nonce: Uint8Array, aad: Uint8Array): void;
  update(input: Uint8Array, output: Uint8Array, at: number): void;
  finishSeal(tag: Uint8Array, output: Uint8Array, end: number): void;
  finishOpen(tag: Uint8Array, output: Uint8Array, end: number): boolean;
  dispose(): void;
}

export interface NativeBackendOptions {
  /** threads for one kernel call, the caller's included (default: every core) */
  threadCount?: number;
  /** the .node file (default: DEFAULT_ADDON_PATH) */
  addonPath?: string;
  /**
   * Products with quantized weights round each row of x to 8-bit blocks first and multiply
   * integers, as llama.cpp does (docs/native.md, "Q8 activations"): faster, and no longer the f32 products the
   * reference computes. Default off.
   */
  q8Activations?: boolean | undefined;
}

/** Loads the addon, or throws an Error that says why (missing file, wrong ABI, a CPU or libc it cannot run on). */
export function loadAddon(path: string = DEFAULT_ADDON_PATH): NativeAddon {
  const loaded: unknown = createRequire(import.meta.url)(path);
  const addon = loaded as Partial<NativeAddon>;
  if (typeof addon.Context !== 'function' || addon.abiVersion !== ADDON_ABI_VERSION) {
    throw new Error(
      `${path} is not a kvfence native addon of ABI version ${ADDON_ABI_VERSION}; rebuild it with npm run build:native`,
    );
  }
  return addon as NativeAddon;
}

let shared: NativeAddon | null | undefined;

/**
 * The addon at its default path, loaded once, for those who use it where they can and do without it elsewhere (the
 * weight arena's huge pages, the secure channel's AEAD); null when it cannot load (selectBackend says why when the
 * native backend is asked for).
 */
export function sharedAddon(): NativeAddon | null {
  if (shared === undefined) {
    try {
      shared = loadAddon();
    } catch {
      shared = null;
    }
  }
  return shared;
}

/**
 * cos and sin of ropeAngle(pos, i) (× the attention factor) for every position below `positions`, with the reference
 * backend's own expression, so the native rotation (in f64, same operations) gives the reference's bits. Grows by
 * doubling.
 */
class RopeTable {
  values = new Float64Array(0); // (positions, ropeDim/2, 2)
  positions = 0;

  constructor(
    readonly theta: number,
    readonly ropeDim: number,
    readonly scaling: RopeScaling | undefined,
  ) {}

  ensure(positionCount: number): void {
    if (positionCount <= this.positions) return;
    assert(positionCount <= LIMITS.contextTokensMax, `position ${positionCount} beyond any context`);
    const grown = Math.min(LIMITS.contextTokensMax, Math.max(positionCount, 2 * this.positions, 64));
    const half = this.ropeDim / 2;
    const values = new Float64Array(grown * half * 2);
    values.set(this.values);
    const mscale = this.scaling?.attnFactor ?? 1;
    for (let pos = this.positions; pos < grown; pos++) {
      for (let i = 0; i < half; i++) {
        const angle = ropeAngle(pos, i, this.ropeDim, this.theta, this.scaling);
        values[(pos * half + i) * 2] = Math.cos(angle) * mscale;
        values[(pos * half + i) * 2 + 1] = Math.sin(angle) * mscale;
      }
    }
    this.values = values;
    this.positions = grown;
  }
}

export class NativeBackend implements Backend {
  readonly name = 'native';
  private readonly context: NativeContext;
  private readonly ropeTables = new Map<string, RopeTable>();
  private lastRopeTable: RopeTable | undefined;
  /** a number per scaling object seen, to key its tables (forward passes build theirs once) */
  private readonly scalingIds = new WeakMap<RopeScaling, number>();
  private nextScalingId = 1;
  private zeroStarts = new Int32Array(0);

  constructor(options: NativeBackendOptions = {}) {
    const threadCount = options.threadCount ?? availableParallelism();
    assert(
      Number.isInteger(threadCount) && threadCount >= 1 && threadCount <= NATIVE_THREAD_COUNT_MAX,
      `thread count ${threadCount} out of range`,
    );
    const addon = loadAddon(options.addonPath);
    this.context = new addon.Context(threadCount, options.q8Activations ?? false);
  }

  /** Whether products with Q8_0 weights run on Q8 activations (NativeBackendOptions.q8Activations). */
  get q8Activations(): boolean {
    return this.context.q8Activations;
  }

  /** The instruction set the kernels run with, and those this CPU could run. */
  get isa(): NativeIsa {
    return this.context.isa;
  }

  get supportedIsas(): readonly NativeIsa[] {
    return this.context.supportedIsas;
  }

  get threadCount(): number {
    return this.context.threadCount;
  }

  /** Native kernel calls so far, by kind, counted inside the addon. */
  get callCounts(): Readonly<Record<NativeOp, number>> {
    return this.context.callCounts();
  }

  /** Switches to another supported instruction set (all give the same bits; tests check that). */
  useIsa(isa: NativeIsa): void {
    this.context.setIsa(isa);
  }

  /** Stops the worker threads; the backend cannot be used afterwards. */
  close(): void {
    this.context.close();
  }

  matmul(out: Float32Array, x: Float32Array, rowCount: number, w: WeightMatrix): void {
    this.context.matmul(out, x, rowCount, w.data, GGML_TYPE_CODES[w.dtype], w.inDim, w.outDim);
  }

  matmuls(x: Float32Array, rowCount: number, parts: readonly MatmulPart[]): void {
    const first = parts[0];
    assert(first !== undefined, 'matmuls needs at least one product');
    const flat: unknown[] = [];
    for (const { out, w, bias, accumulate } of parts) {
      assert(w.inDim === first.w.inDim, `matmuls: ${w.name} does not take ${first.w.name}'s input`);
      flat.push(out, w.data, GGML_TYPE_CODES[w.dtype], w.outDim, bias ?? null, accumulate === true ? 1 : 0);
    }
    this.context.matmuls(x, rowCount, first.w.inDim, flat);
  }

  storeKv(k: Float32Array, v: Float32Array, rows: KvRows, layer: number, layout: KvLayout, arena: KvArena): void {
    this.context.storeKv(
      k,
      v,
      rows.rowCount,
      rows.positions,
      rows.pageTables,
      rows.pageTableStarts,
      layer,
      layout.layerCount,
      layout.pageSize,
      layout.kvDim,
      layout.valuesPerPage,
      arena,
    );
  }

  rmsNorm(out: Float32Array, x: Float32Array, rowCount: number, weight: Float32Array, eps: number): void {
    this.context.rmsNorm(out, x, rowCount, weight, eps);
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
    let table = this.lastRopeTable;
    if (table === undefined || table.theta !== theta || table.ropeDim !== ropeDim || table.scaling !== scaling) {
      let scalingId = 0;
      if (scaling !== undefined) {
        scalingId = this.scalingIds.get(scaling) ?? this.nextScalingId++;
        this.scalingIds.set(scaling, scalingId);
      }
      const key = `${theta}/${ropeDim}/${scalingId}`;
      table = this.ropeTables.get(key) ?? new RopeTable(theta, ropeDim, scaling);
      this.ropeTables.set(key, table);
      this.lastRopeTable = table;
    }
    let positionMax = -1;
    for (let r = 0; r < rowCount; r++) positionMax = Math.max(positionMax, positions[r]!);
    table.ensure(positionMax + 1);
    const neox = style === 'neox' ? 1 : 0;
    this.context.rope(x, rowCount, headCount, headDim, ropeDim, positions, table.values, table.positions, neox);
  }

  swiglu(gate: Float32Array, up: Float32Array, n: number): void {
    this.context.swiglu(gate, up, n);
  }

  geglu(gate: Float32Array, up: Float32Array, n: number): void {
    gegluInPlace(gate, up, n);
  }

  attention(out: Float32Array, q: Float32Array, rows: AttentionRows, shape: AttentionShape, arena: KvArena): void {
    const { layout } = shape;
    this.context.attention(
      out,
      q,
      rows.rowCount,
      rows.kvLengths,
      rows.pageTables,
      rows.pageTableStarts,
      shape.layer,
      layout.layerCount,
      shape.headCount,
      shape.kvHeadCount,
      shape.headDim,
      layout.pageSize,
      layout.kvDim,
      layout.valuesPerPage,
      arena,
      rows.kvStarts ?? this.zeros(rows.rowCount),
    );
  }

  private zeros(n: number): Int32Array {
    if (this.zeroStarts.length < n) this.zeroStarts = new Int32Array(n);
    return this.zeroStarts.subarray(0, n);
  }

  embed(out: Float32Array, tokens: Int32Array, w: WeightMatrix): void {
    this.context.embed(out, tokens, w.data, GGML_TYPE_CODES[w.dtype], w.inDim, w.outDim);
  }

  /** STREAM's triad, a = b + s·c, split over the pool: the memory-bandwidth ceiling the benchmarks compare against. */
  triad(a: Float32Array, b: Float32Array, c: Float32Array, s: number): void {
    this.context.triad(a, b, c, s);
  }
}
