/**
 * `npm run bench:products`: the matrix products of one decode token (every layer's, batch 1 unless --rows), called
 * back to back, as GB/s of weights, for this build of the addon against a baseline build of it (another
 * kvfence_native.node, e.g. one built from an earlier commit). Each of --pairs processes loads both builds and runs
 * --passes turns, each build once a turn, so the drift of a shared machine falls on both within a second; prints each
 * process's median time ratio (this build ÷ baseline, turn by turn) and their median. Without --baseline, this build's
 * figures alone. With --q8-activations, this build runs its quantized products on Q8 activations
 * (docs/native.md); without --baseline it is then compared with itself on f32 activations. The kernel changes in
 * docs/native.md were measured this way (before 2026-12-07, with each build in a process of its own, the processes
 * alternated: ratios scattered ±15-30% on a shared 2-vCPU VM, turn by turn ±5-10%).
 *
 *   npm run bench:products -- [--models 135m-q8_0,135m-q4_k_m] [--baseline path/to/kvfence_native.node]
 *                             [--pairs 5] [--rows 1] [--passes 40] [--threads 2] [--isa avx512|avx2|portable]
 *                             [--q8-activations]
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_ADDON_PATH, type NativeIsa } from '../src/compute/native-backend.js';
import { ensureGeneratedModel } from '../src/model/default-model.js';
import { median } from '../src/util/median.js';
import { parseModel, positive, runWorker } from './bench-cli.js';
import type { ProductsBuild, ProductsJob, ProductsResult } from './products-worker.js';

const ISAS: readonly NativeIsa[] = ['avx512', 'avx2', 'portable'];
const { values } = parseArgs({
  options: {
    models: { type: 'string', default: '135m-f16,135m-q8_0,135m-q4_k_m' },
    baseline: { type: 'string' },
    pairs: { type: 'string', default: '5' },
    rows: { type: 'string', default: '1' },
    passes: { type: 'string', default: '40' },
    threads: { type: 'string', default: String(Math.min(2, availableParallelism())) },
    isa: { type: 'string' },
    'q8-activations': { type: 'boolean', default: false },
  },
});
const isa = values.isa as NativeIsa | undefined;
if (isa !== undefined && !ISAS.includes(isa)) throw new Error(`--isa takes ${ISAS.join(', ')}, got ${isa}`);
const baseline = values.baseline;
if (baseline !== undefined && !existsSync(baseline)) throw new Error(`--baseline: no file at ${baseline}`);
const q8 = values['q8-activations']!;
// this build, then the baseline: another build, or this one on f32 activations
const builds: ProductsBuild[] = [{ addonPath: DEFAULT_ADDON_PATH, q8Activations: q8 }];
if (baseline !== undefined) builds.push({ addonPath: baseline, q8Activations: q8 });
else if (q8) builds.push({ addonPath: DEFAULT_ADDON_PATH, q8Activations: false });
const baselineName = baseline ?? (q8 ? 'this build on f32 activations' : undefined);
const pairs = positive('pairs', values.pairs!);
const common = {
  threadCount: positive('threads', values.threads!),
  rows: positive('rows', values.rows!),
  passes: positive('passes', values.passes!),
  isa,
};
const fixed = (n: number, digits: number) => n.toFixed(digits);

process.stdout.write(
  `decode products of one token, ${common.rows} row(s), ${common.threadCount} threads, median of ${common.passes} ` +
    `passes a process${q8 ? ', Q8 activations' : ''}` +
    `${baselineName === undefined ? '' : `; this build (${DEFAULT_ADDON_PATH}) ÷ baseline (${baselineName})`}\n`,
);
for (const spec of values.models!.split(',')) {
  const m = parseModel(spec);
  const modelPath = ensureGeneratedModel(
    { preset: m.preset, arch: 'llama', dtype: m.dtype, seed: 1 },
    join('.cache', 'bench'),
  );
  const runs = Array.from({ length: pairs }, () =>
    runWorker<ProductsResult>(
      'products-worker.js',
      { ...common, modelPath, builds } satisfies ProductsJob,
      process.env,
    ),
  );
  // each process's median time, then the median rate over the processes
  const times = (build: number) => {
    const ms = runs.map((r) => median(r.milliseconds[build]!));
    return `${ms.map((m) => fixed(m, 2)).join(' ')} ms, ${fixed(median(ms.map((m) => runs[0]!.weightBytes[build]! / m / 1e6)), 1)} GB/s`;
  };
  const first = runs[0]!;
  let line = `${spec} (${first.isa}, ${first.weightBytes.map((b) => fixed(b / 1e6, 0)).join(' / ')} MB): this build ${times(0)}`;
  if (builds.length > 1) {
    const ratios = runs.map((r) => median(r.milliseconds[0]!.map((ms, turn) => ms / r.milliseconds[1]![turn]!)));
    line += `; baseline ${times(1)}`;
    line += `; time ratio by process ${ratios.map((r) => fixed(r, 3)).join(' ')}, median ${fixed(median(ratios), 3)}`;
  }
  process.stdout.write(`${line}\n`);
}
