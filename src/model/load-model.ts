/** Loads a GGUF model file: validated config, weights bound to their roles, tokenizer and chat template. */
import { allocateWeightArena } from '../compute/weight-arena.js';
import { KvfenceError } from '../util/errors.js';
import { readGguf, readGgufHeader } from './gguf-read.js';
import { type GgufMetadata, metaString } from './gguf-types.js';
import { type ModelConfig, modelConfigFromGguf } from './model-config.js';
import { type Tokenizer, tokenizerFromGguf } from './tokenizer.js';
import { bindWeights, checkTensorTable, type ModelWeights } from './weights.js';

/** What a gateway needs of a model: no weights. */
export interface ModelHead {
  path: string;
  config: ModelConfig;
  tokenizer: Tokenizer;
  chatTemplate: string | undefined;
}

export interface LoadedModel extends ModelHead {
  weights: ModelWeights;
  /**
   * the one buffer every tensor lives in, how much of it was advised onto huge pages, and the tensors kept as Q8_0
   * blocks of their Q5_0 values with the bytes that added (widen-q5-0.ts)
   */
  arena: { bytes: number; hugePageBytes: number; widened: { tensors: number; addedBytes: number } };
}

export interface LoadOptions {
  /**
   * keep Q5_0 tensors as Q8_0 blocks of the same values: the same results, 34 bytes per 32 weights instead of 22,
   * faster products (default: undefined and true; false keeps them as stored, for memory)
   */
  widenQ5_0?: boolean | undefined;
}

/** The model's config, tokenizer and chat template from the file's header; the tensors are not read. */
export function loadModelHead(path: string): ModelHead {
  const metadata = readGgufHeader(path).metadata;
  return {
    path,
    ...configAndTokenizer(metadata, path),
    chatTemplate: metaString(metadata, 'tokenizer.chat_template'),
  };
}

/**
 * The config and the tokenizer, which must agree on the vocabulary (llama.cpp takes its size from the token list and
 * refuses an embedding of another): a model whose `vocab_size` and embedding rows differ from its token list would
 * pass ids the tokenizer cannot read, or refuse ids it can.
 */
function configAndTokenizer(metadata: GgufMetadata, path: string): { config: ModelConfig; tokenizer: Tokenizer } {
  let config: ModelConfig;
  let tokenizer: Tokenizer;
  try {
    config = modelConfigFromGguf(metadata, path);
    tokenizer = tokenizerFromGguf(metadata);
  } catch (error) {
    // the tokenizer and the metadata accessors name the key at fault, not the file: the refusal names both
    if (error instanceof KvfenceError && !error.message.startsWith(path))
      throw new KvfenceError(error.code, `${path}: ${error.message}`);
    throw error;
  }
  if (tokenizer.vocabSize !== config.vocabSize) {
    throw new KvfenceError(
      'invalid_model_file',
      `${path}: the vocabulary size is ${config.vocabSize} but the tokenizer has ${tokenizer.vocabSize} tokens`,
    );
  }
  return { config, tokenizer };
}

export function loadModel(path: string, options: LoadOptions = {}): LoadedModel {
  let hugePageBytes = 0;
  let head: { config: ModelConfig; tokenizer: Tokenizer } | undefined;
  const file = readGguf(path, {
    allocate: (bytes) => {
      const arena = allocateWeightArena(bytes);
      hugePageBytes = arena.hugePageBytes;
      return arena.buffer;
    },
    // before the weights: a file refused for its architecture, config, tokenizer or tensor table (a tensor missing or
    // of the wrong shape) is refused for that, at once, not after reading gigabytes of weights (or failing to
    // allocate them)
    checkHeader: (header) => {
      head = configAndTokenizer(header.metadata, path);
      checkTensorTable(head.config, header.tensors, path);
    },
    widenQ5_0: options.widenQ5_0 ?? true,
  });
  const { config, tokenizer } = head!;
  return {
    path,
    config,
    weights: bindWeights(config, file.tensors, path),
    arena: { bytes: file.arenaBytes, hugePageBytes, widened: file.widened },
    tokenizer,
    chatTemplate: metaString(file.header.metadata, 'tokenizer.chat_template'),
  };
}

/** What widening did (load-model's `widenQ5_0`), for the operator; empty when no tensor was widened. */
export function widenedNote(model: LoadedModel): string {
  const { tensors, addedBytes } = model.arena.widened;
  if (tensors === 0) return '';
  return `${tensors} Q5_0 tensors kept as Q8_0 blocks of the same values (+${mib(addedBytes)} MiB; --keep-q5-0 keeps them as stored)`;
}

/** One line for a worker's start: the weight arena's size, how much of it is on huge pages, and what widening added. */
export function weightsSummary(model: LoadedModel): string {
  const { bytes, hugePageBytes } = model.arena;
  const widened = widenedNote(model);
  return `kvfence: weights ${mib(bytes)} MiB, ${mib(hugePageBytes)} MiB of it advised onto 2 MiB pages${widened === '' ? '' : `; ${widened}`}`;
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(1);
}
