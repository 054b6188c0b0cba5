/**
 * `npm run bench:widen`: what keeping Q5_0 weights as Q8_0 blocks of the same values (load-model.ts, `widenQ5_0`)
 * does to greedy decode, against the same model loaded as stored (`--keep-q5-0`), in one process: the two take turns
 * round by round (the first of each turn alternating), each a prompt then --decode tokens, so the drift of a shared
 * machine falls on both. Prints each side's median time a token, their ratio (widened ÷ stored, round by round), the
 * bytes widening added, and whether both generated the same tokens (they must: the weights are the same values).
 *
 *   npm run bench:widen -- [--models 135m-q4_k_m] [--prompt 128] [--decode 32] [--rounds 9] [--threads 2]
 */
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import { argmax } from '../src/engine/sampler.js';
import { makeKvLayout, pagesForTokens } from '../src/kv/kv-layout.js';
import { newPageTable } from '../src/kv/page-table.js';
import { ensureGeneratedModel } from '../src/model/default-model.js';
import { loadModel } from '../src/model/load-model.js';
import { median } from '../src/util/median.js';
import { parseModel, positive } from './bench-cli.js';
import { benchPrompt } from './bench-types.js';
import { benchPool } from './unchecked-pool.js';

const { values } = parseArgs({
  options: {
    models: { type: 'string', default: '135m-q4_k_m' },
    prompt: { type: 'string', default: '128' },
    decode: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '9' },
    threads: { type: 'string', default: String(Math.min(2, availableParallelism())) },
  },
});
const promptTokens = positive('prompt', values.prompt!);
const decodeTokens = positive('decode', values.decode!);
const rounds = positive('rounds', values.rounds!);
const backend = new NativeBackend({ threadCount: positive('threads', values.threads!) });

/** One request: the prompt, then greedy decode; the decode's milliseconds a token and the tokens it chose. */
function decode(forward: ForwardPass, request: string): { msPerToken: number; tokens: number[] } {
  const c = forward.model.config;
  const table = newPageTable({ tenant: 'bench', request });
  if (!forward.pool.grow(table, pagesForTokens(forward.pool.layout, promptTokens + decodeTokens)))
    throw new Error('pool too small');
  const run = (tokens: number[]) => {
    const [out] = forward.run([{ table, tokens, logits: 'last' }]);
    if (out === undefined || !out.ok) throw new Error(`forward failed: ${out?.ok === false ? out.error.message : ''}`);
    return out.logits;
  };
  let logits = run(benchPrompt(c.vocabSize, promptTokens, 1));
  const tokens: number[] = [];
  const started = performance.now();
  for (let i = 0; i < decodeTokens; i++) {
    tokens.push(argmax(logits));
    logits = run([tokens.at(-1)!]);
  }
  const msPerToken = (performance.now() - started) / decodeTokens;
  forward.pool.releaseAll(table);
  return { msPerToken, tokens };
}

process.stdout.write(
  `greedy decode after a ${promptTokens}-token prompt, ${decodeTokens} tokens a round, ${rounds} rounds, ` +
    `${backend.threadCount} threads (${backend.isa}); widened ÷ stored\n`,
);
for (const spec of values.models!.split(',')) {
  const m = parseModel(spec);
  const path = ensureGeneratedModel(
    { preset: m.preset, arch: 'llama', dtype: m.dtype, seed: 1 },
    join('.cache', 'bench'),
  );
  const sides = [true, false].map((widenQ5_0) => {
    const model = loadModel(path, { widenQ5_0 });
    const c = model.config;
    const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, 16);
    const pool = benchPool(layout, pagesForTokens(layout, promptTokens + decodeTokens), false);
    return { model, forward: new ForwardPass(model, backend, pool), ms: [] as number[], tokens: [] as number[] };
  });
  const [widened, stored] = sides as [(typeof sides)[0], (typeof sides)[0]];
  for (const side of sides) decode(side.forward, 'warm-up');
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
      const { msPerToken, tokens } = decode(side.forward, `round-${round}`);
      side.ms.push(msPerToken);
      side.tokens = tokens;
    }
  }
  const ratios = widened.ms.map((ms, round) => ms / stored.ms[round]!);
  const { tensors, addedBytes } = widened.model.arena.widened;
  process.stdout.write(
    `${spec}: ${tensors} tensors widened (+${(addedBytes / 2 ** 20).toFixed(1)} MiB on ${(stored.model.arena.bytes / 2 ** 20).toFixed(1)}); ` +
      `widened ${median(widened.ms).toFixed(2)} ms a token, stored ${median(stored.ms).toFixed(2)}; ` +
      `time ratio ${median(ratios).toFixed(3)} (rounds ${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}); ` +
      `same tokens: ${widened.tokens.join() === stored.tokens.join() ? 'yes' : 'NO'}\n`,
  );
}
backend.close();
