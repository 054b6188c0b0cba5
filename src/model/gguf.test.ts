import assert from 'node:assert/strict';
import { closeSync, ftruncateSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { runCli } from '../../test/helpers/cli.js';
import { tempDirectory } from '../../test/helpers/temp.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { readGguf, readGgufHeader } from './gguf-read.js';
import {
  blockSize,
  GGML_TYPE_CODES,
  type GgufMetadata,
  type GgufTensor,
  type GgufValue,
  metaNumberArray,
  type WeightDType,
} from './gguf-types.js';
import { writeGguf } from './gguf-write.js';
import { loadModel, loadModelHead } from './load-model.js';
import { decodeWeights, encodeWeights } from './quant.js';
import { makeTestModel } from './test-model.js';
import { tokenizerFromGguf } from './tokenizer.js';

const dir = tempDirectory();

/** A file of `tensors` and one more, `huge.weight`, of 1 TiB: a sparse file (nothing of it is on the disk) */
function withHugeTensor(name: string, metadata: GgufMetadata, tensors: GgufTensor[]): string {
  const huge: GgufTensor = { name: 'huge.weight', dtype: 'f32', dims: [8, 1], data: new Float32Array(8) };
  const path = sampleFile(name, metadata, [...tensors, huge]);
  const bytes = readFileSync(path);
  const dimsAt = bytes.lastIndexOf(Buffer.from('huge.weight')) + 'huge.weight'.length + 4;
  bytes.writeBigUInt64LE(BigInt(2 ** 18), dimsAt);
  bytes.writeBigUInt64LE(BigInt(2 ** 20), dimsAt + 8);
  writeFileSync(path, bytes);
  const fd = openSync(path, 'r+');
  ftruncateSync(fd, bytes.length + 2 ** 40);
  closeSync(fd);
  return path;
}

function sampleFile(name: string, metadata?: GgufMetadata, tensors?: GgufTensor[]): string {
  const path = join(dir, name);
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  writeGguf(path, metadata ?? model.metadata, tensors ?? model.tensors);
  return path;
}

test('write then read gives back every metadata value and tensor byte, each tensor in its own lines of one arena', () => {
  const metadata: GgufMetadata = new Map([
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.alignment', { type: 'u32', value: 64 }],
    ['t.u8', { type: 'u8', value: 200 }],
    ['t.i64', { type: 'i64', value: -5_000_000_000 }],
    ['t.f64', { type: 'f64', value: Math.PI }],
    ['t.bool', { type: 'bool', value: true }],
    ['t.strings', { type: 'array', itemType: 'string', value: ['a', 'é', ''] }],
    ['t.floats', { type: 'array', itemType: 'f32', value: [0.5, -2] }],
  ]);
  const values = Float32Array.from({ length: 512 }, (_, i) => Math.sin(i));
  const tensors: GgufTensor[] = (Object.keys(GGML_TYPE_CODES) as WeightDType[]).map((dtype) => {
    const rowLength = Math.max(32, blockSize(dtype));
    return {
      name: `w.${dtype}`,
      dtype,
      dims: [rowLength, 2],
      data: encodeWeights(values.subarray(0, 2 * rowLength), dtype),
    };
  });
  const path = join(dir, 'roundtrip.gguf');
  writeGguf(path, metadata, tensors);
  const arenas: ArrayBuffer[] = [];
  const file = readGguf(path, {
    allocate: (bytes) => {
      arenas.push(new ArrayBuffer(bytes));
      return arenas.at(-1)!;
    },
  });
  assert.deepEqual(file.header.metadata, metadata);
  assert.equal(file.header.alignment, 64);
  assert.equal(arenas.length, 1);
  assert.equal(file.arenaBytes, arenas[0]!.byteLength);
  const placed = [...file.tensors.values()].map((t) => t.data).sort((a, b) => a.byteOffset - b.byteOffset);
  for (const [i, data] of placed.entries()) {
    assert.equal(data.buffer, arenas[0]);
    assert.equal(data.byteOffset % 64, 0, 'a tensor starts on a cache line');
    const next = placed[i + 1]?.byteOffset ?? file.arenaBytes;
    assert.ok(data.byteOffset + data.byteLength <= next, 'tensors do not overlap');
    assert.ok(next - data.byteOffset - data.byteLength < 64, 'only alignment between tensors');
  }
  for (const t of tensors) {
    const back = file.tensors.get(t.name)!;
    assert.equal(back.dtype, t.dtype);
    assert.deepEqual(back.dims, t.dims);
    assert.deepEqual(
      new Uint8Array(back.data.buffer, back.data.byteOffset, back.data.byteLength),
      new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength),
    );
    assert.equal(file.header.tensors.find((i) => i.name === t.name)!.fileOffset % 64, 0);
  }
});

test('dequantized weights stay close to the originals (q8_0 error below half a step)', () => {
  const values = Float32Array.from({ length: 256 }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
  for (const [dtype, tolerance] of [
    ['f16', 1e-2],
    ['bf16', 5e-2],
    ['q8_0', 7 / 127 / 2 + 1e-3],
  ] as const) {
    const out = new Float32Array(values.length);
    decodeWeights(encodeWeights(values, dtype), dtype, 0, values.length, out);
    for (let i = 0; i < values.length; i++) assert.ok(Math.abs(out[i]! - values[i]!) <= tolerance, `${dtype}[${i}]`);
  }
});

test('test models are deterministic: same options give byte-identical files', () => {
  const a = readFileSync(sampleFile('a.gguf'));
  const b = readFileSync(sampleFile('b.gguf'));
  assert.ok(a.equals(b));
});

function expectBad(path: string, pattern: RegExp, load: (path: string) => unknown = readGgufHeader): void {
  assert.throws(
    () => load(path),
    (e: unknown) => e instanceof KvfenceError && pattern.test(e.message),
  );
  const r = runCli(['model', 'inspect', path]);
  assert.equal(r.status, 1, r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
  assert.match(r.stderr, pattern);
  assert.doesNotMatch(r.stderr, /\bat .*\.js:\d+/);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: no control character reaches the terminal
  assert.doesNotMatch(r.stderr.trimEnd(), /[\u0000-\u001f]/);
}

test('bad files give one clear line and exit 1, never a stack trace', () => {
  const good = readFileSync(sampleFile('good.gguf'));
  expectBad(join(dir, 'missing.gguf'), /no such file/);
  expectBad(dir, /is a directory/); // Linux opens a directory for reading: it was an internal error (exit 2)
  writeFileSync(join(dir, 'magic.gguf'), Buffer.concat([Buffer.from('GGML'), good.subarray(4)]));
  expectBad(join(dir, 'magic.gguf'), /wrong magic/);
  writeFileSync(join(dir, 'empty.gguf'), Buffer.alloc(0));
  expectBad(join(dir, 'empty.gguf'), /empty/);
  writeFileSync(join(dir, 'header-cut.gguf'), good.subarray(0, 300));
  expectBad(join(dir, 'header-cut.gguf'), /truncated/);
  writeFileSync(join(dir, 'data-cut.gguf'), good.subarray(0, good.length - 100));
  expectBad(join(dir, 'data-cut.gguf'), /past the end of the file/);
  const version = Buffer.from(good);
  version.writeUInt32LE(7, 4);
  writeFileSync(join(dir, 'version.gguf'), version);
  expectBad(join(dir, 'version.gguf'), /version 7 is not supported/);
});

test('an unknown architecture, an unsupported weight type (IQ2_XXS) and a row of partial blocks are named', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const meta = new Map(model.metadata);
  meta.set('general.architecture', { type: 'string', value: 'mamba' });
  expectBad(sampleFile('arch.gguf', meta), /architecture "mamba" is not supported/, loadModel);
  // a file's strings are quoted in the refusal: the message holds a newline or a terminal escape as the file has it,
  // and the command line writes it escaped, on one line
  meta.set('general.architecture', { type: 'string', value: 'mamba\nkvfence: serving model "ok"\u001b[31m' });
  expectBad(sampleFile('arch-lines.gguf', meta), /architecture "mamba(\n|\\u000a)kvfence: serving model/, loadModel);

  const path = sampleFile('type.gguf');
  const bytes = readFileSync(path);
  const header = readGgufHeader(path);
  // The type code of the first tensor sits 12 bytes before its offset field: patch it to IQ2_XXS (16).
  const nameBytes = Buffer.from(header.tensors[0]!.name);
  const at = bytes.indexOf(nameBytes, 0) + nameBytes.length + 4 + 8 * header.tensors[0]!.dims.length;
  bytes.writeUInt32LE(16, at);
  writeFileSync(path, bytes);
  expectBad(path, /tensor token_embd\.weight has ggml type iq2_xxs \(16\); kvfence reads f32, f16, q4_0, .*q6_k, bf16/);
  bytes.writeUInt32LE(12, at); // Q4_K: its rows (64 values) are not whole super-blocks of 256
  writeFileSync(path, bytes);
  expectBad(path, /q4_k tensor token_embd\.weight has a row of 64 values, not a multiple of 256/);
});

test('offsets past the end of the file, or into another tensor, are refused before any read', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const path = sampleFile('offset.gguf', model.metadata, model.tensors);
  const header = readGgufHeader(path);
  const last = header.tensors.at(-1)!;
  const nameBytes = Buffer.from(last.name);
  const patched = (offset: bigint) => {
    const bytes = readFileSync(path);
    const at = bytes.lastIndexOf(nameBytes, header.dataOffset) + nameBytes.length + 4 + 8 * last.dims.length + 4;
    bytes.writeBigUInt64LE(offset, at);
    const out = join(dir, `offset-${offset}.gguf`);
    writeFileSync(out, bytes);
    return out;
  };
  expectBad(patched(BigInt(1) << BigInt(40)), /past the end of the file/);
  const first = header.tensors.find((t) => t.fileOffset === header.dataOffset)!;
  expectBad(
    patched(BigInt(0)),
    new RegExp(`tensors (${first.name} and ${last.name}|${last.name} and ${first.name}) overlap`),
  );
});

test('a vocabulary size (and embedding) that disagrees with the token list is refused at load, as llama.cpp does', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const extra = 88;
  const tokens = model.tensors.find((t) => t.name === 'token_embd.weight')!.dims[1]!;
  // the embedding and the output padded past the token list, as a hand-edited or badly converted file might be
  const tensors = model.tensors.map((t) => {
    if (t.name !== 'token_embd.weight' && t.name !== 'output.weight') return t;
    const data = new Float32Array((t.data as Float32Array).length + extra * t.dims[0]!);
    data.set(t.data as Float32Array);
    return { ...t, data, dims: [t.dims[0]!, t.dims[1]! + extra] };
  });
  const meta = new Map(model.metadata);
  meta.set('llama.vocab_size', { type: 'u32', value: tokens + extra });
  const path = sampleFile('vocab.gguf', meta, tensors);
  for (const load of [loadModel, loadModelHead]) {
    assert.throws(
      () => load(path),
      (e: unknown) =>
        e instanceof KvfenceError &&
        e.code === 'invalid_model_file' &&
        e.message.includes(`vocabulary size is ${tokens + extra} but the tokenizer has ${tokens} tokens`),
    );
  }
});

test('metadata array items are bounded in all, as each array is declared, before its items are read', () => {
  // two arrays, each within the old per-array cap, over the limit together; the second array's items are not in the
  // file at all: the refusal comes from its declared count
  const metadata: GgufMetadata = new Map([
    ['x.first', { type: 'array', itemType: 'u8', value: [7] }],
    ['x.second', { type: 'array', itemType: 'u8', value: [0] }],
  ]);
  const path = sampleFile('items.gguf', metadata, []);
  const bytes = readFileSync(path);
  const countAt = bytes.indexOf(Buffer.from('x.second')) + 'x.second'.length + 4 + 4;
  bytes.writeBigUInt64LE(BigInt(LIMITS.ggufMetadataItemsMax), countAt);
  writeFileSync(path, bytes.subarray(0, countAt + 8));
  expectBad(
    path,
    new RegExp(
      `array x\\.second has ${LIMITS.ggufMetadataItemsMax} items, after 1 in earlier arrays: over the limit of ` +
        `${LIMITS.ggufMetadataItemsMax} metadata array items in all \\(LIMITS\\.ggufMetadataItemsMax\\)`,
    ),
  );
});

test('a header refused for its architecture or tokenizer is refused before any weight memory or read', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const cases: [string, GgufMetadata, RegExp][] = [
    ['arch', new Map(model.metadata), /architecture "mamba" is not supported/],
    ['tokenizer', new Map(model.metadata), /unsupported tokenizer\.ggml\.model 'bert'/],
  ];
  cases[0][1].set('general.architecture', { type: 'string', value: 'mamba' });
  cases[1][1].set('tokenizer.ggml.model', { type: 'string', value: 'bert' });
  for (const [name, metadata, pattern] of cases) {
    // one 1 TiB tensor in a sparse file: allocating (or reading) it first failed with V8's RangeError instead
    const path = withHugeTensor(`huge-${name}.gguf`, metadata, []);
    assert.equal(readGgufHeader(path).tensors[0]!.byteSize, 2 ** 40);
    assert.throws(
      () => loadModel(path),
      (e: unknown) => e instanceof KvfenceError && e.code === 'unsupported_model' && pattern.test(e.message),
    );
  }
});

test('a metadata key of the wrong type is refused, naming the key and both types, never read as absent', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'qwen2', dtype: 'f32', seed: 3 });
  const types = metaNumberArray(model.metadata, 'tokenizer.ggml.token_type')!;
  const cases: [string, GgufValue, string][] = [
    [
      'tokenizer.ggml.token_type',
      { type: 'array', itemType: 'string', value: types.map(String) },
      'has type array of string, expected array of a number type',
    ],
    ['tokenizer.ggml.bos_token_id', { type: 'string', value: '1' }, 'has type string, expected a number type'],
    ['tokenizer.ggml.add_bos_token', { type: 'u8', value: 1 }, 'has type u8, expected bool'],
    ['tokenizer.ggml.model', { type: 'u32', value: 2 }, 'has type u32, expected string'],
  ];
  for (const [key, value, message] of cases) {
    const metadata = new Map(model.metadata).set(key, value);
    assert.throws(
      () => tokenizerFromGguf(metadata),
      (e: unknown) =>
        e instanceof KvfenceError && e.code === 'invalid_model_file' && e.message === `metadata ${key} ${message}`,
    );
  }
  // loaded from a file, the refusal names the file too
  const file = sampleFile('bos-string.gguf', new Map(model.metadata).set('tokenizer.ggml.bos_token_id', cases[1]![1]));
  assert.throws(
    () => loadModel(file),
    (e: unknown) =>
      e instanceof KvfenceError && e.message === `${file}: metadata tokenizer.ggml.bos_token_id ${cases[1]![2]}`,
  );
  // general.alignment as a string was read as absent (32): written under a key of the same length, then renamed, as
  // the writer itself refuses it
  const metadata = new Map(model.metadata).set('general.alignmenX', { type: 'string', value: '64' });
  metadata.delete('general.alignment');
  const path = sampleFile('alignment.gguf', metadata);
  const bytes = readFileSync(path);
  bytes.write('general.alignment', bytes.indexOf(Buffer.from('general.alignmenX')));
  writeFileSync(path, bytes);
  expectBad(path, /metadata general\.alignment has type string, expected a number type/);
});

test('a norm vector holding NaN or infinity, and RoPE factors of 0 or below, are refused at load, naming the tensor', () => {
  // they loaded, and every logit came out NaN: greedy decoding answered token 0 as a success
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3, llama3Rope: true });
  const cases: [string, number, RegExp][] = [
    ['output_norm.weight', Number.NaN, /tensor output_norm\.weight holds NaN at 5, expected finite values/],
    ['blk.0.attn_norm.weight', Number.POSITIVE_INFINITY, /blk\.0\.attn_norm\.weight holds Infinity at 5/],
    ['rope_freqs.weight', 0, /tensor rope_freqs\.weight holds 0 at 5, expected values above 0/],
    ['rope_freqs.weight', -1, /rope_freqs\.weight holds -1 at 5/],
  ];
  for (const [name, value, pattern] of cases) {
    const tensors = model.tensors.map((t) => {
      if (t.name !== name) return t;
      const data = Float32Array.from(t.data as Float32Array);
      data[5] = value;
      return { ...t, data };
    });
    const path = sampleFile('bad-vector.gguf', model.metadata, tensors);
    assert.throws(
      () => loadModel(path),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_model_file' && pattern.test(e.message),
      `${name} = ${value}`,
    );
  }
});

test('a tensor missing or of the wrong shape is refused from the header, before any weight memory or read', () => {
  const model = makeTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const down = 'blk.0.ffn_down.weight';
  const cases: [string, (t: GgufTensor) => GgufTensor | undefined, RegExp][] = [
    ['missing', (t) => (t.name === down ? undefined : t), /tensor blk\.0\.ffn_down\.weight is missing/],
    [
      'shape',
      (t) => (t.name === down ? { ...t, dims: [t.dims[1]!, t.dims[0]!] } : t),
      /tensor blk\.0\.ffn_down\.weight has shape \[\d+,\d+\], expected/,
    ],
  ];
  for (const [name, change, pattern] of cases) {
    // beside them one 1 TiB tensor in a sparse file: allocating (or reading) it first failed with a RangeError, or
    // read it all before the refusal
    const path = withHugeTensor(
      `table-${name}.gguf`,
      model.metadata,
      model.tensors.map(change).filter((t) => t !== undefined),
    );
    assert.throws(
      () => loadModel(path),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_model_file' && pattern.test(e.message),
      name,
    );
  }
});
