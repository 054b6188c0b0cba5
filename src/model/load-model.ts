/** Loads a GGUF model file: validated config, weights bound to their roles, tokenizer and chat template. */
import { readGguf } from './gguf-read.js';
import { metaString } from './gguf-types.js';
import { type ModelConfig, modelConfigFromGguf } from './model-config.js';
import { type Tokenizer, tokenizerFromGguf } from './tokenizer.js';
import { bindWeights, type ModelWeights } from './weights.js';

export interface LoadedModel {
  path: string;
  config: ModelConfig;
  weights: ModelWeights;
  tokenizer: Tokenizer;
  chatTemplate: string | undefined;
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
