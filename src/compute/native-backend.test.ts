import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { assertSameBits, attentionOf, gaussian, kvCase, weightMatrix } from '../../test/helpers/backend-conformance.js';
import { prefillLogits, promptOf, sequence } from '../../test/helpers/forward-checks.js';
import { forwardFor, loadTestModel } from '../../test/helpers/models.js';
import { assertSameOnEveryIsa, nativeBackendForTest } from '../../test/helpers/native.js';
import { generate } from '../engine/generate.js';
import { GREEDY } from '../engine/sampler.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { KvfenceError } from '../util/errors.js';
import { SeededRandom } from '../util/random.js';
import type { Backend } from './backend.js';
import { NativeBackend } from './native-backend.js';
import { ReferenceBackend } from './reference-backend.js';
import { selectBackend } from './select-backend.js';

const native = nativeBackendForTest();
after(() => native.close());

const qwen = loadTestModel({ preset: 'tiny', arch: 'qwen2', dtype: 'f32', seed: 11, kvHeadCount: 2 });
const llamaQ8 = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'q8_0', seed: 12 });
// sliding-window layers (window 8: pages of 8 and chunks of 7 cut windows everywhere), GELU, Q/K and sandwich norms
const gemma = loadTestModel({ preset: 'tiny', arch: 'gemma3', dtype: 'f32', seed: 14 });
// RoPE frequency factors and a head size other than dim / heads
const llama3 = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f16', seed: 15, llama3Rope: true, headDim: 32 });
// the usual head size, 64 values, four query heads to one KV head
const wideHeads = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 16, headDim: 64, kvHeadCount: 1 });

for (const [label, model] of [
  ['qwen2 f32 GQA', qwen],
  ['llama q8_0', llamaQ8],
  ['gemma3 f32', gemma],
  ['llama 3 RoPE f16', llama3],
] as const) {
  test(`native ${label}: chunked prefill (1, 7, 64 tokens) gives bit-identical logits to one-shot prefill`, () => {
    const before = native.callCounts.matmul;
    const forward = forwardFor(model, 64, 8, native);
    const prompt = promptOf(model, 150, 1);
    const oneShot = prefillLogits(forward, prompt, prompt.length);
    for (const chunk of [1, 7, 64])
      assertSameBits(prefillLogits(forward, prompt, chunk), oneShot, `chunks of ${chunk}`);
    assert.equal(forward.pool.freePageCount, 64);
    assert.ok(native.callCounts.matmul > before, 'the native matmul ran');
  });

  test(`native ${label}: a batch of 4 sequences gives bit-identical logits to each alone, prefill and decode`, () => {
    const forward = forwardFor(model, 64, 16, native);
    const prompts = [promptOf(model, 5, 1), promptOf(model, 40, 2), promptOf(model, 17, 3), promptOf(model, 1, 4)];
    const alone = prompts.map((p) => prefillLogits(forward, p, p.length));
    const tables = prompts.map((p, i) => sequence(forward, `batch-${i}`, p.length + 3));
    const batched = forward.run(prompts.map((p, i) => ({ table: tables[i]!, tokens: p, logits: 'all' as const })));
    batched.forEach((out, i) => {
      assert.ok(out.ok);
      assertSameBits(out.logits, alone[i]!, `sequence ${i}`);
    });
    const next = [1, 2, 3, 4];
    const stepTogether = forward.run(
      tables.map((table, i) => ({ table, tokens: [next[i]!], logits: 'last' as const })),
    );
    for (const t of tables) forward.pool.releaseAll(t);
    prompts.forEach((p, i) => {
      const solo = prefillLogits(forward, [...p, next[i]!], p.length + 1);
      const out = stepTogether[i]!;
      assert.ok(out.ok);
      assertSameBits(out.logits, solo.slice(p.length * model.config.vocabSize), `decode step of sequence ${i}`);
    });
    assert.equal(forward.pool.freePageCount, 64);
  });
}

test('attention splits a long row over threads only when a call has too few tasks, with the same bits', () => {
  const random = new SeededRandom(31);
  const shape = { headCount: 9, kvHeadCount: 3, headDim: 64 };
  const c = kvCase(random, { ...shape, pageSize: 16, rowCount: 16, kvLengthMax: 520 });
  c.kvLengths.fill(520);
  c.kvLengths[1] = 100; // one span
  const q = gaussian(random, 16 * shape.headCount * shape.headDim, 1.5);
  const qDim = shape.headCount * shape.headDim;
  const rows = Array.from({ length: 16 }, (_, r) => r);
  const three = nativeBackendForTest({ threadCount: 3 });
  const one = nativeBackendForTest({ threadCount: 1 });
  try {
    const splits = (backend: NativeBackend, body: () => Float32Array): [Float32Array, number] => {
      const before = backend.callCounts.attentionSplit;
      const out = body();
      return [out, backend.callCounts.attentionSplit - before];
    };
    // 16 rows × 3 KV heads are tasks enough for 3 threads: each row's spans in one task
    const [batched, batchedSplits] = splits(three, () => attentionOf(three, q, c, rows));
    assert.equal(batchedSplits, 0);
    for (const r of [0, 1, 15]) {
      const row = batched.subarray(r * qDim, (r + 1) * qDim);
      // alone, 3 tasks for 3 threads: a row of 5 spans has them split, a row of one span has nothing to split
      const [alone, aloneSplits] = splits(three, () => attentionOf(three, q, c, [r]));
      assert.equal(aloneSplits, c.kvLengths[r]! > 128 ? 1 : 0, `row ${r}`);
      assertSameBits(alone, row, `row ${r} alone, 3 threads`);
      // one thread never splits
      const [single, singleSplits] = splits(one, () => attentionOf(one, q, c, [r]));
      assert.equal(singleSplits, 0);
      assertSameBits(single, row, `row ${r} alone, 1 thread`);
    }
  } finally {
    three.close();
    one.close();
  }
});

test('a batch whose weight rows span several blocks: every output the bits of its row alone, on every instruction set', () => {
  // AVX2's plain tiles hold 4 rows of x and walk 192 KiB blocks of weight rows, and a quantized batch of more than 16
  // rows dequantizes such a block at a time: rows of 8,192 f32 (32 KiB), f16 or bf16 values and of 4,096 quantized ones
  // (16 KiB dequantized) make blocks of 6 or 12 outputs, several a task; 17 rows end in a lone one
  const random = new SeededRandom(37);
  const [outDim, rowCount] = [40, 17];
  const cases = [
    ...(['f32', 'f16', 'bf16'] as const).map((dtype) => ({ dtype, inDim: 8192 })),
    ...(['q8_0', 'q4_0', 'q4_k', 'q6_k'] as const).map((dtype) => ({ dtype, inDim: 4096 })),
  ];
  for (const { dtype, inDim } of cases) {
    const x = gaussian(random, rowCount * inDim);
    const w = weightMatrix(random, dtype, inDim, outDim);
    const one = nativeBackendForTest({ threadCount: 1 });
    const alone = new Float32Array(rowCount * outDim);
    try {
      for (let r = 0; r < rowCount; r++)
        one.matmul(alone.subarray(r * outDim, (r + 1) * outDim), x.subarray(r * inDim, (r + 1) * inDim), 1, w);
    } finally {
      one.close();
    }
    assertSameOnEveryIsa(
      (backend) => {
        const batched = new Float32Array(rowCount * outDim);
        backend.matmul(batched, x, rowCount, w);
        return batched;
      },
      alone,
      `${dtype} ${inDim}→${outDim}, ${rowCount} rows`,
    );
  }
});

test('every instruction set and thread count gives the same logits, bit for bit', () => {
  // head sizes 16 and 64 (each instruction set groups attention's row-heads and keys by its registers)
  for (const model of [qwen, gemma, wideHeads]) {
    const prompt = promptOf(model, 90, 5);
    const want = prefillLogits(forwardFor(model, 32, 16, native), prompt, 90);
    // 90 rows a call go through the plain tile, 7 through the wide one where the instruction set has it
    for (const chunk of [90, 7])
      assertSameOnEveryIsa(
        (backend) => prefillLogits(forwardFor(model, 32, 16, backend), prompt, chunk),
        want,
        `${model.config.arch}, chunks of ${chunk}`,
      );
  }
});

test('native and reference agree on sliding-window, GELU and scaled-RoPE models: logits within 1e-4 of their spread', () => {
  for (const model of [gemma, llama3]) {
    const prompt = promptOf(model, 40, 7);
    const fast = prefillLogits(forwardFor(model, 16, 8, native), prompt, 7);
    const slow = prefillLogits(forwardFor(model, 16, 8, new ReferenceBackend()), prompt, 7);
    const spread = Math.sqrt(slow.reduce((s, v) => s + v * v, 0) / slow.length);
    let worst = 0;
    for (let i = 0; i < slow.length; i++) worst = Math.max(worst, Math.abs(fast[i]! - slow[i]!));
    assert.ok(worst <= 1e-4 * spread, `${model.config.arch}: largest difference ${worst}, spread ${spread}`);
  }
});

test('native and reference forward passes agree: logits within 1e-4 of their spread, same greedy tokens', () => {
  const model = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f16', seed: 13, logitScale: 8 });
  const prompt = promptOf(model, 33, 6);
  const fast = prefillLogits(forwardFor(model, 16, 16, native), prompt, 8);
  const slow = prefillLogits(forwardFor(model, 16, 16, new ReferenceBackend()), prompt, 8);
  // f32 accumulation against f64 over a 2-layer pass: errors of ~1e-6 relative, far inside 1e-4 of the spread.
  const spread = Math.sqrt(slow.reduce((s, v) => s + v * v, 0) / slow.length);
  for (let i = 0; i < slow.length; i++) {
    assert.ok(Math.abs(fast[i]! - slow[i]!) <= 1e-4 * spread, `logit ${i}: ${fast[i]} vs ${slow[i]}`);
  }
  const run = (backend: Backend) =>
    generate(forwardFor(model, 16, 16, backend), prompt, {
      maxTokens: 24,
      sampling: GREEDY,
      prefillChunkTokens: 16,
      isStopToken: () => false,
    });
  assert.deepEqual(run(native).tokens, run(new ReferenceBackend()).tokens);
});

test('the glue rejects bad arguments before any kernel runs', () => {
  const random = new SeededRandom(7);
  const w = weightMatrix(random, 'f32', 32, 8);
  const x = gaussian(random, 2 * 32);
  const before = native.callCounts.matmul;
  assert.throws(() => native.matmul(new Float32Array(15), x, 2, w), RangeError, 'out too short');
  assert.throws(() => native.matmul(new Float32Array(16), x, 3, w), RangeError, 'x too short');
  assert.throws(
    () => native.matmul(new Float32Array(16), x, 2, { ...w, dtype: 'f16' }),
    TypeError,
    'f16 needs a Uint16Array',
  );
  assert.throws(() => native.matmul(x, x, 2, { ...w, outDim: 7 }), RangeError, 'weights shorter than the shape');
  assert.throws(() => native.matmul(x.subarray(0, 16), x, 2, w), RangeError, 'out overlapping x');
  const q8 = weightMatrix(random, 'q8_0', 32, 8);
  assert.throws(
    () => native.matmul(new Float32Array(16), x, 2, { ...q8, data: (q8.data as Uint8Array).subarray(1) }),
    RangeError,
  );
  assert.throws(
    () => native.embed(new Float32Array(32), Int32Array.of(8), w),
    RangeError,
    'token outside the vocabulary',
  );
  assert.equal(native.callCounts.matmul, before, 'no rejected call reached a kernel');

  const c = kvCase(random, { headCount: 2, kvHeadCount: 1, headDim: 16, pageSize: 4, rowCount: 2, kvLengthMax: 10 });
  const q = gaussian(random, 2 * 32);
  const call = (pageTables: Int32Array, kvLengths = c.kvLengths, arena = c.arena) =>
    native.attention(
      new Float32Array(2 * 32),
      q,
      { rowCount: 2, kvLengths, pageTables, pageTableStarts: c.pageTableStarts },
      { layer: 1, headCount: 2, kvHeadCount: 1, headDim: 16, layout: c.layout },
      arena,
    );
  call(c.pageTables);
  const pageCount = c.arena.length / c.layout.valuesPerPage;
  const outside = c.pageTables.slice();
  outside[0] = pageCount;
  assert.throws(() => call(outside), /outside the arena/);
  const negative = c.pageTables.slice();
  negative[c.pageTableStarts[1]!] = -1;
  assert.throws(() => call(negative), /outside the arena/);
  assert.throws(() => call(c.pageTables, Int32Array.of(1, 10_000)), /runs past pageTables/);
  assert.throws(() => call(c.pageTables, Int32Array.of(0, 1)), /no positions/);
  assert.throws(
    () => call(c.pageTables, c.kvLengths, c.arena.subarray(0, c.layout.valuesPerPage)),
    /outside the arena/,
  );
});

test('matmuls and storeKv reject bad arguments before any kernel runs', () => {
  const random = new SeededRandom(9);
  const w = weightMatrix(random, 'f32', 32, 8);
  const x = gaussian(random, 2 * 32);
  const out = () => new Float32Array(16);
  const before = native.callCounts.matmuls;
  assert.throws(() => native.matmuls(x, 2, [{ out: new Float32Array(15), w }]), RangeError, 'out too short');
  assert.throws(() => native.matmuls(x, 3, [{ out: out(), w }]), RangeError, 'x too short');
  assert.throws(() => native.matmuls(x, 2, [{ out: out(), w, bias: new Float32Array(7) }]), /bias/, 'short bias');
  assert.throws(() => native.matmuls(x, 2, [{ out: x.subarray(16, 32), w }]), /overlap x/, 'out inside x');
  const shared = new Float32Array(24);
  assert.throws(
    () =>
      native.matmuls(x, 2, [
        { out: shared, w },
        { out: shared.subarray(8), w },
      ]),
    /another part's out/,
    'two parts writing the same floats',
  );
  assert.throws(
    () =>
      native.matmuls(x, 2, [
        { out: out(), w, bias: shared.subarray(0, 8) },
        { out: shared, w },
      ]),
    /a bias/,
    "one part's out is another's bias",
  );
  const nine = Array.from({ length: 9 }, () => ({ out: out(), w }));
  assert.throws(() => native.matmuls(x, 2, nine), /1 to 8 products/);
  assert.equal(native.callCounts.matmuls, before, 'no rejected call reached a kernel');

  const layout = makeKvLayout(2, 8, 4);
  const arena = new Uint16Array(3 * layout.valuesPerPage);
  const kv = gaussian(random, 2 * 8);
  const rows = (positions: Int32Array, pageTables = Int32Array.of(0, 1, 2)) => ({
    rowCount: 2,
    positions,
    pageTables,
    pageTableStarts: Int32Array.of(0, 1),
  });
  const stores = native.callCounts.storeKv;
  assert.throws(() => native.storeKv(kv, kv, rows(Int32Array.of(0, 8)), 1, layout, arena), /runs past pageTables/);
  assert.throws(() => native.storeKv(kv, kv, rows(Int32Array.of(-1, 0)), 1, layout, arena), /runs past pageTables/);
  const outside = rows(Int32Array.of(0, 0), Int32Array.of(0, 3));
  assert.throws(() => native.storeKv(kv, kv, outside, 1, layout, arena), /outside the arena/);
  assert.throws(() => native.storeKv(kv, kv, rows(Int32Array.of(0, 0)), 2, layout, arena), RangeError, 'layer');
  assert.throws(() => native.storeKv(kv.subarray(1), kv, rows(Int32Array.of(0, 0)), 1, layout, arena), /k has/);
  assert.throws(
    () => native.storeKv(new Float32Array(arena.buffer, 0, 16), kv, rows(Int32Array.of(0, 0)), 1, layout, arena),
    /overlap/,
  );
  assert.equal(native.callCounts.storeKv, stores, 'no rejected call wrote the arena');
  assert.ok(arena.every((value) => value === 0));
  native.storeKv(kv, kv, rows(Int32Array.of(3, 4)), 1, layout, arena);
  assert.equal(native.callCounts.storeKv, stores + 1);
});

test('selectBackend: native when the addon loads; otherwise one warning and the reference backend, or an error', () => {
  const warnings: string[] = [];
  const warn = (line: string) => warnings.push(line);
  const auto = selectBackend('auto', warn, { threadCount: 1 });
  assert.ok(auto instanceof NativeBackend);
  auto.close();
  assert.ok(selectBackend('reference', warn) instanceof ReferenceBackend);
  assert.deepEqual(warnings, []);

  const missing = { addonPath: '/nonexistent/kvfence_native.node' };
  assert.ok(selectBackend('auto', warn, missing) instanceof ReferenceBackend);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /native kernels unavailable .*npm run build:native/);
  assert.throws(
    () => selectBackend('native', warn, missing),
    (error: unknown) => error instanceof KvfenceError && /native backend is not available/.test(error.message),
  );
  assert.equal(warnings.length, 1);
});

test('a closed native backend refuses further calls', () => {
  const backend = nativeBackendForTest({ threadCount: 2 });
  backend.close();
  assert.throws(() => backend.swiglu(new Float32Array(4), new Float32Array(4), 4), /closed/);
});
