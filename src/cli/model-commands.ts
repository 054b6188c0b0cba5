/** `kvfence model make-test` and `kvfence model inspect`. */
import type { Command } from 'commander';
import { KV_VALUE_BYTES } from '../kv/kv-layout.js';
import { readGgufHeader } from '../model/gguf-read.js';
import { GGML_TYPE_CODES, metaNumber, metaString, metaStringArray } from '../model/gguf-types.js';
import { writeGguf } from '../model/gguf-write.js';
import { ARCHITECTURES, type ModelConfig, modelConfigFromGguf } from '../model/model-config.js';
import { type ModelFileType, QUANT_MIXES } from '../model/quant-mix.js';
import { makeTestModel, TEST_PRESETS, type TestPreset } from '../model/test-model.js';
import { tokenizerFromGguf } from '../model/tokenizer.js';
import { widenedBytes } from '../model/widen-q5-0.js';
import { parseChoice, parseInteger, parseNumber } from './options.js';

const FILE_TYPES: readonly ModelFileType[] = [...(Object.keys(GGML_TYPE_CODES) as ModelFileType[]), ...QUANT_MIXES];

export function addModelCommands(program: Command): void {
  const model = program.command('model').description('make and inspect GGUF model files');
  model
    .command('make-test')
    .description('write a deterministic random-weight model with a real BPE vocabulary')
    .requiredOption('--out <file>', 'where to write the GGUF file')
    .option(
      '--preset <name>',
      'shape: tiny, small, 15m or 135m',
      parseChoice(Object.keys(TEST_PRESETS) as TestPreset[]),
      'tiny',
    )
    .option('--arch <name>', ARCHITECTURES.join(', '), parseChoice(ARCHITECTURES), 'llama')
    .option(
      '--dtype <type>',
      `weight type of every matrix (${Object.keys(GGML_TYPE_CODES).join(', ')}; as llama-quantize --pure) ` +
        `or a llama-quantize mix (${QUANT_MIXES.join(', ')})`,
      parseChoice(FILE_TYPES),
      'f32',
    )
    .option('--seed <n>', 'random seed', parseInteger(0, 2 ** 32 - 1), 1)
    .option(
      '--tokenizer <kind>',
      'gpt2 (byte-level BPE) or llama (SentencePiece style)',
      parseChoice(['gpt2', 'llama'] as const),
      'gpt2',
    )
    .option(
      '--logit-scale <s>',
      'spread of output logits (large: sharp, for greedy comparisons)',
      parseNumber(0.001, 1000),
      1,
    )
    .option('--context <n>', 'declared context length', parseInteger(1, 1 << 22))
    .option('--kv-heads <n>', 'KV head count (grouped-query attention below the head count)', parseInteger(1, 1024))
    .option('--hf-tokenizer <file>', 'a Hugging Face tokenizer.json: the model gets that real vocabulary')
    .option(
      '--head-dim <n>',
      'head size other than dim / heads (written as attention.key_length)',
      parseInteger(2, 1024),
    )
    .option('--rope-dim <n>', 'rotated dims per head, fewer than the head size (partial rotary)', parseInteger(2, 1024))
    .option('--llama3-rope', "Llama 3.1's RoPE: base 500000 and rope_freqs frequency factors (llama)")
    .option('--tied', 'tie the output to the token embedding')
    .action(
      (o: {
        out: string;
        preset: TestPreset;
        arch: (typeof ARCHITECTURES)[number];
        dtype: ModelFileType;
        seed: number;
        tokenizer: 'gpt2' | 'llama';
        logitScale: number;
        context?: number;
        kvHeads?: number;
        hfTokenizer?: string;
        headDim?: number;
        ropeDim?: number;
        llama3Rope?: boolean;
        tied?: boolean;
      }) => {
        const made = makeTestModel({
          preset: o.preset,
          arch: o.arch,
          dtype: o.dtype,
          seed: o.seed,
          tokenizer: o.tokenizer,
          logitScale: o.logitScale,
          ...(o.context !== undefined ? { contextLength: o.context } : {}),
          ...(o.kvHeads !== undefined ? { kvHeadCount: o.kvHeads } : {}),
          ...(o.hfTokenizer !== undefined ? { hfTokenizer: o.hfTokenizer } : {}),
          ...(o.headDim !== undefined ? { headDim: o.headDim } : {}),
          ...(o.ropeDim !== undefined ? { ropeDim: o.ropeDim } : {}),
          ...(o.llama3Rope === true ? { llama3Rope: true } : {}),
          ...(o.tied === true ? { tied: true } : {}),
        });
        writeGguf(o.out, made.metadata, made.tensors);
        process.stdout.write(`wrote ${o.out} (${o.preset} ${o.arch} ${o.dtype}, seed ${o.seed})\n`);
      },
    );
  model
    .command('inspect')
    .description("print a model's architecture, shapes, weight types, context and tokenizer")
    .argument('<file>', 'GGUF file')
    .action((file: string) => {
      process.stdout.write(describeModel(file));
    });
}

/** What kvfence's KV pool holds per token: every layer's K and V in f16, sliding-window layers included. */
export function kvBytesPerToken(c: ModelConfig): number {
  return c.layerCount * 2 * c.kvHeadCount * c.headDim * KV_VALUE_BYTES;
}

/** The architecture's own traits, in one line: rotation, head norms, sliding window, activation, scales. */
function architectureDetails(c: ModelConfig, tensors: readonly { name: string }[]): string {
  const has = (suffix: string) => tensors.some((t) => t.name.endsWith(suffix));
  const sliding = c.slidingLayers.filter((s) => s).length;
  const parts = [
    `rotates ${c.ropeDim} of ${c.headDim} dims`,
    c.ropeFreqScale !== 1 ? `RoPE scale ${c.ropeFreqScale}` : undefined,
    c.ropeAttnFactor !== 1 ? `RoPE attention factor ${c.ropeAttnFactor}` : undefined,
    has('rope_freqs.weight') ? 'rope_freqs factors' : undefined,
    has('rope_factors_long.weight')
      ? `long/short RoPE factors (long above ${c.ropeOriginalContext} tokens)`
      : undefined,
    has('attn_q_norm.weight') ? 'per-head Q/K RMSNorm' : undefined,
    has('post_attention_norm.weight') ? 'sandwich norms' : undefined,
    has('attn_qkv.weight') ? 'fused QKV' : undefined,
    sliding > 0
      ? `${sliding} of ${c.layerCount} layers sliding-window (${c.slidingWindow} tokens, base ${c.ropeThetaSliding})`
      : undefined,
    `${c.ffnActivation === 'gelu' ? 'GELU' : 'SiLU'}-gated FFN`,
    c.embeddingScale !== 1 ? `embedding × ${c.embeddingScale.toFixed(3)}` : undefined,
    c.finalLogitSoftcap > 0 ? `logit softcap ${c.finalLogitSoftcap}` : undefined,
  ];
  return parts.filter((p) => p !== undefined).join(', ');
}

/** The weights' size once loaded, where it differs from the file's: Q5_0 tensors are widened (load-model.ts). */
function inMemory(tensorBytes: number, q5_0Bytes: number): string[] {
  if (q5_0Bytes === 0) return [];
  const loaded = tensorBytes - q5_0Bytes + widenedBytes(q5_0Bytes);
  return [
    `in memory:     ${(loaded / 1e6).toFixed(2)} MB (Q5_0 kept as Q8_0 blocks of the same values; as stored with --keep-q5-0)`,
  ];
}

export function describeModel(file: string): string {
  const header = readGgufHeader(file);
  const meta = header.metadata;
  const c = modelConfigFromGguf(meta, file);
  const tokenizer = tokenizerFromGguf(meta);
  const dtypes = new Map<string, { tensors: number; bytes: number }>();
  let parameters = 0;
  for (const t of header.tensors) {
    const entry = dtypes.get(t.dtype) ?? { tensors: 0, bytes: 0 };
    entry.tensors += 1;
    entry.bytes += t.byteSize;
    dtypes.set(t.dtype, entry);
    parameters += t.dims.reduce((a, b) => a * b, 1);
  }
  const tensorBytes = header.tensors.reduce((n, t) => n + t.byteSize, 0);
  const typeMix = [...dtypes]
    .sort(([, a], [, b]) => b.bytes - a.bytes)
    .map(
      ([d, e]) =>
        `${d} ×${e.tensors} (${(e.bytes / 1e6).toFixed(2)} MB, ${((100 * e.bytes) / tensorBytes).toFixed(1)}%)`,
    );
  const lines = [
    `file:          ${file} (GGUF v${header.version}, ${(header.fileSize / 1e6).toFixed(1)} MB)`,
    `name:          ${c.name}`,
    `architecture:  ${c.arch} (${c.ropeStyle === 'adjacent' ? 'RoPE on adjacent pairs' : 'NEOX RoPE'}, base ${c.ropeTheta})`,
    `               ${architectureDetails(c, header.tensors)}`,
    `shape:         ${c.layerCount} layers, dim ${c.dim}, ${c.headCount} heads × ${c.headDim} (${c.kvHeadCount} KV heads), ffn ${c.ffnDim}`,
    `parameters:    ${(parameters / 1e6).toFixed(2)} M in ${header.tensors.length} tensors`,
    `weight types:  ${typeMix.join(', ')}`,
    `weight bytes:  ${(tensorBytes / 1e6).toFixed(2)} MB, ${((8 * tensorBytes) / parameters).toFixed(2)} bits per weight`,
    ...inMemory(tensorBytes, dtypes.get('q5_0')?.bytes ?? 0),
    `output:        ${header.tensors.some((t) => t.name === 'output.weight') ? 'own matrix' : 'tied to the token embedding'}`,
    `context:       ${c.contextLength} tokens (declared by the file)`,
    `KV per token:  ${kvBytesPerToken(c)} bytes (f16 K and V: ${c.layerCount} layers × 2 × ${c.kvHeadCount * c.headDim} values)`,
    `tokenizer:     ${metaString(meta, 'tokenizer.ggml.model')} / pre ${metaString(meta, 'tokenizer.ggml.pre') ?? 'default'}, ` +
      `${metaStringArray(meta, 'tokenizer.ggml.tokens')?.length ?? 0} tokens, bos ${tokenizer.bosId ?? 'none'}, eos ${tokenizer.eosId ?? 'none'}`,
    `chat template: ${metaString(meta, 'tokenizer.chat_template') !== undefined ? 'yes' : 'no'}`,
    `alignment:     ${metaNumber(meta, 'general.alignment') ?? 32}`,
  ];
  return `${lines.join('\n')}\n`;
}
