/**
 * The embedded default model: a generated random-weight model (no download, ever), made from a fixed seed on first use
 * and cached. Bump TEST_MODEL_FORMAT when the generator's output changes, so stale caches are not reused.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { writeGguf } from './gguf-write.js';
import { makeTestModel, type TestModelOptions } from './test-model.js';

export const TEST_MODEL_FORMAT = 2;

export const DEFAULT_MODEL: TestModelOptions = {
  preset: '15m',
  arch: 'llama',
  dtype: 'f32',
  seed: 42,
  // sharp logits: greedy output is stable across backends, so it is a useful model for checks and demos
  logitScale: 6,
};

export function cacheDirectory(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env['KVFENCE_CACHE_DIR'];
  if (explicit !== undefined && explicit !== '') return explicit;
  const xdg = env['XDG_CACHE_HOME'];
  return join(xdg !== undefined && xdg !== '' ? xdg : join(homedir(), '.cache'), 'kvfence');
}

/**
 * Path of the cached model made from `options`, generating it first if it is not there. The name spells the usual
 * options; any other (a context length, a head count...) adds a hash of them, so two models never share a file.
 */
export function ensureGeneratedModel(options: TestModelOptions, directory: string = cacheDirectory()): string {
  const { preset, arch, dtype, tokenizer, seed, logitScale, ...other } = options;
  const tag = [preset, arch, dtype, tokenizer ?? 'gpt2', `s${seed}`, `x${logitScale ?? 1}`];
  const set = Object.entries(other).filter(([, value]) => value !== undefined);
  if (set.length > 0) {
    const spelled = JSON.stringify(set.sort(([a], [b]) => (a < b ? -1 : 1)));
    tag.push(createHash('sha256').update(spelled).digest('hex').slice(0, 12));
  }
  const path = join(directory, `generated-${tag.join('-')}-v${TEST_MODEL_FORMAT}.gguf`);
  if (existsSync(path)) return path;
  mkdirSync(directory, { recursive: true });
  const partial = `${path}.${process.pid}.partial`;
  const model = makeTestModel(options);
  writeGguf(partial, model.metadata, model.tensors);
  renameSync(partial, path); // atomic: a concurrent reader sees the whole file or none
  return path;
}
