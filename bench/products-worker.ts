/**
 * Worker of bench/products.ts: one addon build in its own process. Times one decode token's layer products (every
 * layer's Q, K, V, O, gate, up and down, `rows` rows of x each), called back to back, and prints the median.
 */
import { NativeBackend, type NativeIsa } from '../src/compute/native-backend.js';
import { loadModel } from '../src/model/load-model.js';
import { median } from '../src/util/median.js';
import { RESULT_MARKER } from './bench-types.js';
import { layerMatrices, matrixBytes } from './decode-weights.js';

export interface ProductsJob {
  modelPath: string;
  addonPath: string;
  threadCount: number;
  rows: number;
  /** timed passes over the products, after one untimed */
  passes: number;
  isa: NativeIsa | undefined;
}

export interface ProductsResult {
  milliseconds: number;
  weightBytes: number;
  isa: string;
}

const job = JSON.parse(process.argv[2] ?? '{}') as ProductsJob;
const model = loadModel(job.modelPath);
const backend = new NativeBackend({ threadCount: job.threadCount, addonPath: job.addonPath });
if (job.isa !== undefined) backend.useIsa(job.isa);
const matrices = layerMatrices(model);
const widest = Math.max(...matrices.flatMap((w) => [w.inDim, w.outDim]));
const x = Float32Array.from({ length: widest * job.rows }, (_, i) => Math.sin(i));
const out = new Float32Array(widest * job.rows);
const pass = () => {
  const started = performance.now();
  for (const w of matrices) backend.matmul(out, x, job.rows, w);
  return performance.now() - started;
};
pass();
const result: ProductsResult = {
  milliseconds: median(Array.from({ length: job.passes }, pass)),
  weightBytes: matrixBytes(matrices),
  isa: backend.isa,
};
backend.close();
process.stdout.write(`${RESULT_MARKER}${JSON.stringify(result)}\n`);
