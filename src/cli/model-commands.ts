/** `kvfence model make-test` and `kvfence model inspect`. */
import type { Command } from 'commander';
import { readGgufHeader } from '../model/gguf-read.js';
import type { WeightDType } from '../model/gguf-types.js';
import { metaNumber, metaString, metaStringArray } from '../model/gguf-types.js';
import { writeGguf } from '../model/gguf-write.js';
import { ARCHITECTURES, modelConfigFromGguf } from '../model/model-config.js';
import { makeTestModel, TEST_PRESETS, type TestPreset } from '../model/test-model.js';
import { tokenizerFromGguf } from '../model/tokenizer.js';
import { parseChoice, parseInteger, parseNumber } from './options.js';

const DTYPES: readonly WeightDType[] = ['f32', 'f16', 'bf16', 'q8_0'];

export function addModelCommands(program: Command): void {
  const model = program.command('model').description('make and inspect GGUF model files');
  model
    .command('make-test')
    .description('write a deterministic random-weight model with a real BPE vocabulary')
    .requiredOption('--out <file>', 'where to write the GGUF file')
    .option(
      '--preset <name>',
      'shape: tiny, 15m or 135m',
      parseChoice(Object.keys(TEST_PRESETS) as TestPreset[]),
      'tiny',
    )
    .option('--arch <name>', 'llama or qwen2', parseChoice(ARCHITECTURES), 'llama')
    .option('--dtype <type>', 'weight type: f32, f16, bf16 or q8_0', parseChoice(DTYPES), 'f32')
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
    .action(
      (o: {
        out: string;
        preset: TestPreset;
        arch: (typeof ARCHITECTURES)[number];
        dtype: WeightDType;
        seed: number;
        tokenizer: 'gpt2' | 'llama';
        logitScale: number;
        context?: number;
        kvHeads?: number;
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

export function describeModel(file: string): string {
  const header = readGgufHeader(file);
  const meta = header.metadata;
  const c = modelConfigFromGguf(meta, file);
  const tokenizer = tokenizerFromGguf(meta);
  const dtypes = new Map<string, number>();
  let parameters = 0;
  for (const t of header.tensors) {
    dtypes.set(t.dtype, (dtypes.get(t.dtype) ?? 0) + 1);
    parameters += t.dims.reduce((a, b) => a * b, 1);
  }
  const lines = [
    `file:          ${file} (GGUF v${header.version}, ${(header.fileSize / 1e6).toFixed(1)} MB)`,
    `name:          ${c.name}`,
    `architecture:  ${c.arch} (${c.ropeStyle === 'adjacent' ? 'RoPE on adjacent pairs' : 'NEOX RoPE'}, base ${c.ropeTheta})`,
    `shape:         ${c.layerCount} layers, dim ${c.dim}, ${c.headCount} heads × ${c.headDim} (${c.kvHeadCount} KV heads), ffn ${c.ffnDim}`,
    `parameters:    ${(parameters / 1e6).toFixed(2)} M in ${header.tensors.length} tensors`,
    `weight types:  ${[...dtypes].map(([d, n]) => `${d} ×${n}`).join(', ')}`,
    `output:        ${header.tensors.some((t) => t.name === 'output.weight') ? 'own matrix' : 'tied to the token embedding'}`,
    `context:       ${c.contextLength} tokens (declared by the file)`,
    `tokenizer:     ${metaString(meta, 'tokenizer.ggml.model')} / pre ${metaString(meta, 'tokenizer.ggml.pre') ?? 'default'}, ` +
      `${metaStringArray(meta, 'tokenizer.ggml.tokens')?.length ?? 0} tokens, bos ${tokenizer.bosId ?? 'none'}, eos ${tokenizer.eosId ?? 'none'}`,
    `chat template: ${metaString(meta, 'tokenizer.chat_template') !== undefined ? 'yes' : 'no'}`,
    `alignment:     ${metaNumber(meta, 'general.alignment') ?? 32}`,
  ];
  return `${lines.join('\n')}\n`;
}
