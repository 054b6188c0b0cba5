// Fuzzing in CI: every target with a small, seeded budget (a failure names the input and reproduces). Long runs:
// `npm run fuzz -- --runs 1000000 [--target NAME] [--seed N]`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readGgufHeader } from '../../src/model/gguf-read.js';
import { modelConfigFromGguf } from '../../src/model/model-config.js';
import { testModelFile } from '../helpers/models.js';
import { SERVING_MODEL } from '../serving/serve-helpers.js';
import { runTarget } from './fuzz-target.js';
import { FUZZ_TARGETS } from './targets.js';

const CI_SEED = 20261203;

for (const target of FUZZ_TARGETS) {
  test(`fuzz ${target.name}: ${target.ciRuns} inputs, no crash, no 5xx, nothing leaked`, async () => {
    await runTarget(target, target.ciRuns, CI_SEED);
  });
}

// Found by `npm run fuzz -- --target gguf`: a header claiming 3,254,779,906 layers sized an array before the layer
// count was checked, and the process ran out of heap.
test('fuzz regression: a header with billions of layers is refused before anything is sized by it', () => {
  const { metadata } = readGgufHeader(testModelFile(SERVING_MODEL));
  metadata.set('llama.block_count', { type: 'u32', value: 3_254_779_906 });
  assert.throws(
    () => modelConfigFromGguf(metadata, 'fuzzed.gguf'),
    (e: { code?: string; message?: string }) => e.code === 'invalid_model_file' && /3254779906 layers/.test(e.message!),
  );
});
