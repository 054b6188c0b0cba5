/**
 * `kvfence generate`: one prompt through the model, printing the text and prefill/decode speeds (or one JSON object).
 * A single pass measures a cold start (first touch of the weights, kernel warm-up); `--repeat N` runs one unmeasured
 * warm-up pass, then N measured passes, and reports their medians, labelled warm, so figures compare with llama-bench's
 * (which warms up too) like with like.
 */
import type { Command } from 'commander';
import { ForwardPass } from '../compute/forward.js';
import { BACKEND_PREFERENCES, type BackendPreference, selectBackend } from '../compute/select-backend.js';
import { type GenerateResult, generate } from '../engine/generate.js';
import { GREEDY } from '../engine/sampler.js';
import { makeKvLayout, pagesForTokens } from '../kv/kv-layout.js';
import { PagePool } from '../kv/page-pool.js';
import { renderChatTemplate } from '../model/chat-template.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { type LoadedModel, loadModel, widenedNote } from '../model/load-model.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { median } from '../util/median.js';
import { KEEP_Q5_0_HELP, Q8_ACTIVATIONS_HELP, widensQ5_0 } from './flags.js';
import { parseChoice, parseInteger, parseNumber } from './options.js';

interface GenerateCliOptions {
  model?: string;
  prompt: string;
  tokens: number;
  chat?: boolean;
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  json?: boolean;
  repeat?: number;
  pageSize: number;
  chunk: number;
  backend: BackendPreference;
  /** commander's name for `--keep-q5-0` */
  keepQ50?: boolean;
  q8Activations?: boolean;
}

export function addGenerateCommand(program: Command): void {
  program
    .command('generate')
    .description('generate text for one prompt (the embedded model unless --model is given)')
    .option('--model <file>', 'GGUF model file (default: the embedded generated model)')
    .requiredOption('--prompt <text>', 'prompt text')
    .option('-n, --tokens <n>', 'tokens to generate', parseInteger(1, LIMITS.generateTokensMax), 32)
    .option('--chat', "wrap the prompt as a user message in the model's chat template")
    .option('--temperature <t>', 'sampling temperature (0: greedy)', parseNumber(0, 100), 0)
    .option('--top-k <k>', 'keep the k most likely tokens (0: all)', parseInteger(0, LIMITS.vocabSizeMax), 0)
    .option('--top-p <p>', 'keep the smallest set with this much probability', parseNumber(1e-6, 1), 1)
    .option('--seed <s>', 'sampling seed', parseInteger(0, 2 ** 32 - 1), 0)
    .option('--page-size <tokens>', 'KV page size in tokens', parseInteger(1, 4096), 16)
    .option('--chunk <tokens>', 'prefill chunk size in tokens', parseInteger(1, 1 << 16), 64)
    .option('--backend <kind>', 'auto (native if built), native or reference', parseChoice(BACKEND_PREFERENCES), 'auto')
    .option('--keep-q5-0', KEEP_Q5_0_HELP)
    .option('--q8-activations', Q8_ACTIVATIONS_HELP)
    .option('--json', 'print one JSON object instead of text')
    .option(
      '--repeat <n>',
      'one warm-up pass, then n measured passes: report median (warm) speeds',
      parseInteger(1, REPEAT_MAX),
    )
    .action((o: GenerateCliOptions) => runGenerate(o));
}

/** Measured passes at most: each is a whole generation, so more only makes the command slow, not the median better. */
const REPEAT_MAX = 100;

function speeds(promptLength: number, result: GenerateResult): { prefill: number; decode: number } {
  return {
    prefill: promptLength / (result.prefillMs / 1000),
    decode: result.tokens.length > 1 ? (result.tokens.length - 1) / (result.decodeMs / 1000) : 0,
  };
}

function promptTokens(model: LoadedModel, o: GenerateCliOptions): number[] {
  const { tokenizer } = model;
  if (o.chat !== true) return tokenizer.encode(o.prompt, { addSpecial: true });
  if (model.chatTemplate === undefined)
    throw new KvfenceError('invalid_request_error', `${model.path} has no chat template; drop --chat`);
  const text = renderChatTemplate(model.chatTemplate, [{ role: 'user', content: o.prompt }], {
    addGenerationPrompt: true,
    bosToken: tokenizer.bosId !== undefined ? tokenizer.tokenText(tokenizer.bosId) : '',
    eosToken: tokenizer.eosId !== undefined ? tokenizer.tokenText(tokenizer.eosId) : '',
  });
  return tokenizer.encode(text, { addSpecial: false, parseSpecial: true });
}

function runGenerate(o: GenerateCliOptions): void {
  const model = loadModel(o.model ?? ensureGeneratedModel(DEFAULT_MODEL), { widenQ5_0: widensQ5_0(o) });
  const widened = widenedNote(model);
  if (widened !== '') process.stderr.write(`kvfence: ${widened}\n`);
  const prompt = promptTokens(model, o);
  const c = model.config;
  const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, o.pageSize);
  const pool = new PagePool(
    layout,
    Math.max(1, pagesForTokens(layout, Math.min(prompt.length + o.tokens, c.contextLength))),
  );
  const backend = selectBackend(o.backend, (line) => process.stderr.write(`${line}\n`), {
    q8Activations: o.q8Activations === true,
  });
  const forward = new ForwardPass(model, backend, pool);
  const decoder = new TextDecoder('utf-8');
  const options = {
    maxTokens: o.tokens,
    sampling: o.temperature === 0 ? GREEDY : { temperature: o.temperature, topK: o.topK, topP: o.topP, seed: o.seed },
    prefillChunkTokens: o.chunk,
    isStopToken: (id: number) => model.tokenizer.isEndOfGeneration(id),
  };
  // The first pass prints the text; with --repeat it is the warm-up and the measured passes print nothing.
  const result = generate(forward, prompt, {
    ...options,
    ...(o.json === true
      ? {}
      : {
          onToken: (id: number) =>
            process.stdout.write(decoder.decode(model.tokenizer.decodeBytes([id]), { stream: true })),
        }),
  });
  const measured =
    o.repeat === undefined
      ? [speeds(prompt.length, result)]
      : Array.from({ length: o.repeat }, () => speeds(prompt.length, generate(forward, prompt, options)));
  const prefillRuns = measured.map((m) => m.prefill);
  const decodeRuns = measured.map((m) => m.decode);
  const prefillTokensPerSecond = median(prefillRuns);
  const decodeTokensPerSecond = median(decodeRuns);
  const warmth = o.repeat === undefined ? 'cold' : 'warm';
  if (o.json === true) {
    const json = {
      model: model.path,
      promptTokens: result.promptTokens,
      tokens: result.tokens,
      logprobs: result.logprobs,
      text: model.tokenizer.decode(result.tokens),
      finishReason: result.finishReason,
      speeds: warmth,
      measuredRuns: measured.length,
      prefillTokensPerSecond,
      decodeTokensPerSecond,
      prefillTokensPerSecondRuns: prefillRuns,
      decodeTokensPerSecondRuns: decodeRuns,
    };
    process.stdout.write(`${JSON.stringify(json)}\n`);
    return;
  }
  process.stdout.write(`${decoder.decode()}\n`);
  process.stderr.write(
    `[${prompt.length} prompt tokens: ${prefillTokensPerSecond.toFixed(1)} tokens/s prefill; ` +
      `${result.tokens.length} generated: ${decodeTokensPerSecond.toFixed(1)} tokens/s decode; finish: ${result.finishReason}; ` +
      `${o.repeat === undefined ? 'cold: one pass, no warm-up' : `warm: median of ${o.repeat} after a warm-up`}]\n`,
  );
}
