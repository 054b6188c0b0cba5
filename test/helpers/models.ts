/** Generated test models, written once per process to a temp folder and loaded through the real reader. */
import { join } from 'node:path';
import type { Backend } from '../../src/compute/backend.js';
import { ForwardPass } from '../../src/compute/forward.js';
import { ReferenceBackend } from '../../src/compute/reference-backend.js';
import { makeKvLayout } from '../../src/kv/kv-layout.js';
import { PagePool } from '../../src/kv/page-pool.js';
import { writeGguf } from '../../src/model/gguf-write.js';
import { type LoadedModel, type LoadOptions, loadModel } from '../../src/model/load-model.js';
import { makeTestModel, type TestModelOptions } from '../../src/model/test-model.js';
import { tempDirectory } from './temp.js';

const dir = tempDirectory('kvfence-models-');
const written = new Map<string, string>();

export function testModelFile(options: TestModelOptions): string {
  const key = JSON.stringify(options);
  let path = written.get(key);
  if (path === undefined) {
    path = join(dir, `m${written.size}.gguf`);
    const made = makeTestModel(options);
    writeGguf(path, made.metadata, made.tensors);
    written.set(key, path);
  }
  return path;
}

export function loadTestModel(options: TestModelOptions, load: LoadOptions = {}): LoadedModel {
  return loadModel(testModelFile(options), load);
}

export function forwardFor(
  model: LoadedModel,
  pageCount: number,
  pageSize = 16,
  backend: Backend = new ReferenceBackend(),
): ForwardPass {
  const c = model.config;
  return new ForwardPass(
    model,
    backend,
    new PagePool(makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, pageSize), pageCount),
  );
}
