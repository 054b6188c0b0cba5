/** The weights a decode step reads, as the bench scripts count them. */
import { tensorByteSize } from '../src/model/gguf-types.js';
import type { LoadedModel } from '../src/model/load-model.js';
import type { WeightMatrix } from '../src/model/weights.js';

/** Every layer's seven products (Q, K, V, O, gate, up, down), in the order a decode step runs them. */
export function layerMatrices(model: LoadedModel): WeightMatrix[] {
  return model.weights.layers.flatMap((l) => [l.wq, l.wk, l.wv, l.wo, l.wGate, l.wUp, l.wDown]);
}

/** The bytes `matrices` take as stored (quantized blocks included). */
export function matrixBytes(matrices: readonly WeightMatrix[]): number {
  return matrices.reduce((sum, w) => sum + tensorByteSize(w.dtype, w.inDim * w.outDim), 0);
}
