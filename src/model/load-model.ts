/** Loads a GGUF model file: validated config, weights bound to their roles, tokenizer and chat template. */
import { readGguf, readGgufHeader } from './gguf-read.js';
import { metaString } from './gguf-types.js';
import { type ModelConfig, modelConfigFromGguf } from './model-config.js';
import { type Tokenizer, tokenizerFromGguf } from './tokenizer.js';
import { bindWeights, type ModelWeights } from './weights.js';

/** What a gateway needs of a model: no weights. */
export interface ModelHead {
  path: string;
  config: ModelConfig;
  tokenizer: Tokenizer;
  chatTemplate: string | undefined;
}

export interface LoadedModel extends ModelHead {
  weights: ModelWeights;
}

/** The model's config, tokenizer and chat template from the file's header; the tensors are not read. */
export function loadModelHead(path: string): ModelHead {
  const metadata = readGgufHeader(path).metadata;
  return {
    path,
    config: modelConfigFromGguf(metadata, path),
    tokenizer: tokenizerFromGguf(metadata),
    chatTemplate: metaString(metadata, 'tokenizer.chat_template'),
  };
}

export function loadModel(path: string): LoadedModel {
  const file = readGguf(path);
  const config = modelConfigFromGguf(file.header.metadata, path);
  const tokenizer = tokenizerFromGguf(file.header.metadata);
  return {
    path,
    config,
    weights: bindWeights(config, file.tensors, path),
    tokenizer,
    chatTemplate: metaString(file.header.metadata, 'tokenizer.chat_template'),
  };
}
