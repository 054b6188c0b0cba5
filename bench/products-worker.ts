/**
 * Worker of bench/products.ts: one decode token's layer products (every layer's Q, K, V, O, gate, up and down, `rows`
 * rows of x each), called back to back, on each of one or two backends (addon builds, or one build with and without
 * Q8 activations) loaded side by side in this process. The
 * builds take turns pass by pass (the first of each turn alternating), so the drift of a shared machine falls on both
 * within a second; returns every timed pass of each.
 */
import { NativeBackend, type NativeIsa } from '../src/compute/native-backend.js';
import { loadModel } from '../src/model/load-model.js';
import type { WeightMatrix } from '../src/model/weights.js';
import { RESULT_MARKER } from './bench-types.js';
import { layerMatrices, matrixBytes } from './decode-weights.js';

/** One backend the worker times: an addon build, and whether its products run on Q8 activations. */
export interface ProductsBuild {
  addonPath: string;
  q8Activations: boolean;
}

export interface ProductsJob {
  modelPath: string;
  builds: ProductsBuild[];
  threadCount: number;
  rows: number;
  /** timed passes over the products for each build, after one untimed */
  passes: number;
  isa: NativeIsa | undefined;
}

export interface ProductsResult {
  /** milliseconds of each timed pass, by build in builds' order */
  milliseconds: number[][];
  /** the weights a pass reads, by build */
  weightBytes: number[];
  isa: string;
}

const job = JSON.parse(process.argv[2] ?? '{}') as ProductsJob;
// the model as each build reads it: Q8 activations take Q5_0 as stored, f32 activations widened (flags.ts widensQ5_0)
const models = new Map<boolean, WeightMatrix[]>();
const matricesOf = (q8Activations: boolean): WeightMatrix[] => {
  const loaded = models.get(q8Activations) ?? layerMatrices(loadModel(job.modelPath, { widenQ5_0: !q8Activations }));
  models.set(q8Activations, loaded);
  return loaded;
};
const backends = job.builds.map(({ addonPath, q8Activations }) => {
  const backend = new NativeBackend({ threadCount: job.threadCount, addonPath, q8Activations });
  if (job.isa !== undefined) backend.useIsa(job.isa);
  return { backend, matrices: matricesOf(q8Activations) };
});
const widest = Math.max(...backends.flatMap(({ matrices }) => matrices.flatMap((w) => [w.inDim, w.outDim])));
const x = Float32Array.from({ length: widest * job.rows }, (_, i) => Math.sin(i));
const out = new Float32Array(widest * job.rows);
const pass = ({ backend, matrices }: (typeof backends)[number]) => {
  const started = performance.now();
  for (const w of matrices) backend.matmul(out, x, job.rows, w);
  return performance.now() - started;
};
for (const backend of backends) pass(backend);
const milliseconds = backends.map((): number[] => []);
for (let turn = 0; turn < job.passes; turn++) {
  const order = backends.map((_, i) => i);
  if (turn % 2 === 1) order.reverse();
  for (const i of order) milliseconds[i]!.push(pass(backends[i]!));
}
const result: ProductsResult = {
  milliseconds,
  weightBytes: backends.map(({ matrices }) => matrixBytes(matrices)),
  isa: backends[0]!.backend.isa,
};
for (const { backend } of backends) backend.close();
process.stdout.write(`${RESULT_MARKER}${JSON.stringify(result)}\n`);
