/** What the bench scripts that spawn workers share: their arguments and how a worker's result comes back. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { GGML_TYPE_CODES } from '../src/model/gguf-types.js';
import { QUANT_MIXES } from '../src/model/quant-mix.js';
import { type BenchModel, RESULT_MARKER } from './bench-types.js';

export function positive(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} needs a positive integer, got ${text}`);
  return n;
}

/** `135m-f16`, `15m-q8_0`, `135m-q4_k_m`: a preset and a weight type or llama-quantize mix. */
export function parseModel(spec: string): BenchModel {
  const match = /^(15m|135m|small|tiny)-(\w+)$/.exec(spec);
  const fileTypes: readonly string[] = [...Object.keys(GGML_TYPE_CODES), ...QUANT_MIXES];
  if (match === null || !fileTypes.includes(match[2]!))
    throw new Error(`unknown model ${spec}; use e.g. 135m-f16 (presets 15m, 135m; ${fileTypes.join(', ')})`);
  return { preset: match[1] as BenchModel['preset'], dtype: match[2] as BenchModel['dtype'] };
}

/** Runs dist/bench/<script> in its own process with the job as JSON and returns its RESULT_MARKER line, parsed. */
export function runWorker<T>(script: string, job: unknown, env: NodeJS.ProcessEnv): T {
  const result = spawnSync(process.execPath, [fileURLToPath(new URL(script, import.meta.url)), JSON.stringify(job)], {
    env,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 16 * 1024 * 1024,
    timeout: 30 * 60 * 1000,
  });
  const line = (result.stdout ?? '').split('\n').find((l) => l.startsWith(RESULT_MARKER));
  if (result.status !== 0 || line === undefined)
    throw new Error(`${script} failed (exit ${result.status ?? result.signal})`);
  return JSON.parse(line.slice(RESULT_MARKER.length)) as T;
}
