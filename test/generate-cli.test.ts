/** `kvfence generate` end to end through the built CLI, on the embedded model and on a file. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { runCli } from './helpers/cli.js';
import { testModelFile } from './helpers/models.js';
import { tempDirectory } from './helpers/temp.js';

const cache = tempDirectory('kvfence-cache-');
const env = { ...process.env, KVFENCE_CACHE_DIR: cache };

interface GenerateJson {
  promptTokens: number[];
  tokens: number[];
  logprobs: number[];
  text: string;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
}

test('the embedded model is generated once, cached, and gives the same greedy answer twice', () => {
  const first = runCli(['generate', '--prompt', 'Hello, kvfence', '-n', '8', '--json'], env);
  assert.equal(first.status, 0, first.stderr);
  const a = JSON.parse(first.stdout) as GenerateJson;
  assert.equal(a.tokens.length, a.logprobs.length);
  assert.ok(a.tokens.length >= 1 && a.tokens.length <= 8);
  assert.ok(a.promptTokens.length > 0);
  assert.ok(a.logprobs.every((l) => l <= 0 && Number.isFinite(l)));
  assert.ok(a.prefillTokensPerSecond > 0);
  const second = runCli(['generate', '--prompt', 'Hello, kvfence', '-n', '8', '--json'], env);
  assert.deepEqual(JSON.parse(second.stdout).tokens, a.tokens);
});

test('text mode prints the text and the speeds; chat mode uses the template', () => {
  const model = testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 5, logitScale: 8 });
  const plain = runCli(['generate', '--model', model, '--prompt', 'abc', '-n', '5']);
  assert.equal(plain.status, 0, plain.stderr);
  assert.match(plain.stderr, /tokens\/s prefill; \d+ generated: [\d.]+ tokens\/s decode/);
  const chat = runCli(['generate', '--model', model, '--prompt', 'abc', '-n', '5', '--chat', '--json']);
  assert.equal(chat.status, 0, chat.stderr);
  const direct = runCli(['generate', '--model', model, '--prompt', 'abc', '-n', '5', '--json']);
  assert.ok(
    (JSON.parse(chat.stdout) as GenerateJson).promptTokens.length >
      (JSON.parse(direct.stdout) as GenerateJson).promptTokens.length,
  );
});

test('a Q5_0 model is widened at load unless --keep-q5-0, and answers the same either way', () => {
  const model = testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'q5_0', seed: 5, logitScale: 8 });
  const args = ['generate', '--model', model, '--prompt', 'abc def', '-n', '6', '--json'];
  const widened = runCli(args);
  const kept = runCli([...args, '--keep-q5-0']);
  assert.equal(widened.status, 0, widened.stderr);
  assert.equal(kept.status, 0, kept.stderr);
  assert.match(
    widened.stderr,
    /^kvfence: \d+ Q5_0 tensors kept as Q8_0 blocks of the same values \(\+[\d.]+ MiB; --keep-q5-0/,
  );
  assert.doesNotMatch(kept.stderr, /Q5_0/);
  const answer = (r: { stdout: string }) => {
    const { tokens, logprobs } = JSON.parse(r.stdout) as GenerateJson;
    return { tokens, logprobs };
  };
  assert.deepEqual(answer(widened), answer(kept));
  // `model inspect` gives the size in memory beside the file's: the Q5_0 tensors at 34 bytes a block instead of 22
  const inspect = runCli(['model', 'inspect', model]);
  assert.equal(inspect.status, 0, inspect.stderr);
  const mb = (label: string) => Number(new RegExp(`${label}: +([\\d.]+) MB`).exec(inspect.stdout)?.[1]);
  const q5_0 = Number(/q5_0 ×\d+ \(([\d.]+) MB/.exec(inspect.stdout)?.[1]);
  assert.ok(Math.abs(mb('in memory') - (mb('weight bytes') + (q5_0 * 12) / 22)) < 0.02, inspect.stdout);
  const plain = runCli(['model', 'inspect', testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 5 })]);
  assert.doesNotMatch(plain.stdout, /in memory/);
});

test('a prompt over the context is refused with one line, before any work', () => {
  const model = testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 5, contextLength: 32 });
  const r = runCli(['generate', '--model', model, '--prompt', 'word '.repeat(40), '-n', '4']);
  assert.equal(r.status, 1);
  assert.match(
    r.stderr,
    /^kvfence: prompt \(\d+ tokens\) \+ max tokens \(4\) = \d+ exceeds the context of 32 tokens\n$/,
  );
  const bad = runCli(['generate', '--model', join(cache, 'nope.gguf'), '--prompt', 'x']);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /no such file/);
});

test('--json labels one pass cold; --repeat N warms up once and reports the medians of N measured passes as warm', () => {
  const model = testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 5, logitScale: 8 });
  const keys = [
    'model',
    'promptTokens',
    'tokens',
    'logprobs',
    'text',
    'finishReason',
    'speeds',
    'measuredRuns',
    'prefillTokensPerSecond',
    'decodeTokensPerSecond',
    'prefillTokensPerSecondRuns',
    'decodeTokensPerSecondRuns',
  ];
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[(xs.length - 1) / 2]!;
  const args = ['generate', '--model', model, '--prompt', 'abc def', '-n', '6', '--json'];
  const cold = runCli(args);
  assert.equal(cold.status, 0, cold.stderr);
  const c = JSON.parse(cold.stdout) as Record<string, unknown> & GenerateJson;
  assert.deepEqual(Object.keys(c), keys);
  assert.equal(c.speeds, 'cold');
  assert.equal(c.measuredRuns, 1);
  assert.deepEqual(c.prefillTokensPerSecondRuns, [c.prefillTokensPerSecond]);
  assert.deepEqual(c.decodeTokensPerSecondRuns, [c.decodeTokensPerSecond]);

  const warm = runCli([...args, '--repeat', '3']);
  assert.equal(warm.status, 0, warm.stderr);
  const w = JSON.parse(warm.stdout) as Record<string, unknown> & GenerateJson;
  assert.deepEqual(Object.keys(w), keys);
  assert.equal(w.speeds, 'warm');
  assert.equal(w.measuredRuns, 3);
  const prefillRuns = w.prefillTokensPerSecondRuns as number[];
  const decodeRuns = w.decodeTokensPerSecondRuns as number[];
  assert.equal(prefillRuns.length, 3);
  assert.equal(decodeRuns.length, 3);
  assert.equal(w.prefillTokensPerSecond, median(prefillRuns));
  assert.equal(w.decodeTokensPerSecond, median(decodeRuns));
  assert.deepEqual(w.tokens, c.tokens, 'repeating changes the speeds reported, never the answer');

  const text = runCli(['generate', '--model', model, '--prompt', 'abc def', '-n', '6', '--repeat', '2']);
  assert.equal(text.status, 0, text.stderr);
  assert.match(text.stderr, /; warm: median of 2 after a warm-up\]\n$/);
  const once = runCli(['generate', '--model', model, '--prompt', 'abc def', '-n', '6']);
  assert.match(once.stderr, /; cold: one pass, no warm-up\]\n$/);
  assert.equal(text.stdout, once.stdout, 'the text is printed once, not once per pass');
  const zero = runCli([...args, '--repeat', '0']);
  assert.equal(zero.status, 1);
  assert.match(zero.stderr, /--repeat <n>' argument '0' is invalid\. expected an integer from 1 to 100/);
});

test('--q8-activations: a Q8_0 model answers on the native kernels, and the reference backend refuses it', () => {
  const model = testModelFile({ preset: 'tiny', arch: 'llama', dtype: 'q8_0', seed: 5, logitScale: 8 });
  const args = ['generate', '--model', model, '--prompt', 'abc def', '-n', '6', '--json'];
  const q8 = runCli([...args, '--q8-activations']);
  assert.equal(q8.status, 0, q8.stderr);
  assert.match(q8.stderr, /quantized products on Q8 activations \(--q8-activations\)/);
  const f32 = runCli(args);
  const logprobs = (r: { stdout: string }) => (JSON.parse(r.stdout) as GenerateJson).logprobs;
  assert.equal(logprobs(q8).length, 6);
  assert.notDeepEqual(logprobs(q8), logprobs(f32));
  const refused = runCli([...args, '--q8-activations', '--backend', 'reference']);
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /Q8 activations \(--q8-activations\) need the native backend/);
});
