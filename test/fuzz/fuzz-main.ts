/**
 * `npm run fuzz -- [--runs N] [--target NAME] [--seed N]`: long fuzz runs, one target after another, each reporting
 * inputs, time and inputs per second; the first failing input (shrunk) is printed and the exit status is 1.
 */
import { parseArgs } from 'node:util';
import { runTarget } from './fuzz-target.js';
import { FUZZ_TARGETS } from './targets.js';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '100000' }, target: { type: 'string' }, seed: { type: 'string' } },
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, not ${values.runs}`);
const seed = values.seed === undefined ? Date.now() % 2 ** 31 : Number(values.seed);
const targets = FUZZ_TARGETS.filter((t) => values.target === undefined || t.name === values.target);
if (targets.length === 0) throw new Error(`no target ${values.target} (${FUZZ_TARGETS.map((t) => t.name).join(', ')})`);
let failed = false;
for (const target of targets) {
  const started = performance.now();
  try {
    await runTarget(target, runs, seed);
    const s = (performance.now() - started) / 1000;
    console.log(
      `${target.name}: ${runs} inputs, seed ${seed}, ${s.toFixed(1)} s (${(runs / s).toFixed(0)}/s): no failure`,
    );
  } catch (error) {
    failed = true;
    console.log(`${target.name}: FAILED (seed ${seed})\n${error instanceof Error ? error.message : String(error)}`);
  }
}
process.exit(failed ? 1 : 0);
