/**
 * Worker of bench/products.ts: one decode token's layer products (every layer's Q, K, V, O, gate, up and down, `rows`
 * rows of x each), called back to back, on each of one or two addon builds loaded side by side in this process. The
 * builds take turns pass by pass (the first of each turn alternating), so the drift of a shared machine falls on both
 * within a second; returns every timed pass of each.
 */
import { NativeBackend, type NativeIsa } from '../src/compute/native-backend.js';
import { loadModel } from '../src/model/load-model.js';
import { RESULT_MARKER } from './bench-types.js';
import { layerMatrices, matrixBytes } from './decode-weights.js';

export interface ProductsJob {
  modelPath: string;
  addonPaths: string[];
  threadCount: number;
  rows: number;
  /** timed passes over the products for each build, after one untimed */
  passes: number;
  isa: NativeIsa | undefined;
}

export interface ProductsResult {
  /** milliseconds of each timed pass, by build in addonPaths' order */
  milliseconds: number[][];
  weightBytes: number;
  isa: string;
}

const job = JSON.parse(process.argv[2] ?? '{}') as ProductsJob;
const model = loadModel(job.modelPath);
const backends = job.addonPaths.map((addonPath) => {
  const backend = new NativeBackend({ threadCount: job.threadCount, addonPath });
  if (job.isa !== undefined) backend.useIsa(job.isa);
  return backend;
});
const matrices = layerMatrices(model);
const widest = Math.max(...matrices.flatMap((w) => [w.inDim, w.outDim]));
const x = Float32Array.from({ length: widest * job.rows }, (_, i) => Math.sin(i));
const out = new Float32Array(widest * job.rows);
const pass = (backend: NativeBackend) => {
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
const result: ProductsResult = { milliseconds, weightBytes: matrixBytes(matrices), isa: backends[0]!.isa };
for (const backend of backends) backend.close();
process.stdout.write(`${RESULT_MARKER}${JSON.stringify(result)}\n`);
