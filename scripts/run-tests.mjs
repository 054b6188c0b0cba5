// Runs every compiled test file (dist/**/*.test.js) with node's built-in test runner. Node 20's `--test` has no globs,
// so the list is gathered here. Optional arguments filter by substring of the path.
//
// Two phases, each file in its own process. First the files that neither time nor load anything, two at a time: the
// unit tests under src/ and the compute-only tests under test/ (forward passes against llama.cpp, spin, manifests).
// Then, one at a time, every other file: servers, clusters, audits, noisy neighbours and whatever measures time or
// waits for a deadline, which a neighbour's load could fail. A src/ test that measures time, sleeps or waits for a
// deadline belongs in TIMED_UNITS; a new file under test/ runs alone unless it is added to SIDE_BY_SIDE.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const TIMED_UNITS = [
  'cluster/supervisor',
  'cluster/worker-link',
  'decode/decode-worker',
  'engine/batch-runner',
  'engine/engine-choices',
  'engine/engine-pace',
  'engine/engine',
  'engine/prefill-engine',
  'engine/prefill-pace',
  'gateway/json-body',
  'gateway/stream-writer',
  'gateway/tenant-gate',
  'launch/worker-health',
  'model/chat-template',
  'model/tokenizer',
  'model/vocab-build',
  'prefill/prefill-worker',
  'structured/grammar-thread',
  'util/json-steps',
].map((name) => join('dist/src', `${name}.test.js`));
const SIDE_BY_SIDE = [
  'architectures',
  'deploy/manifests',
  'fuzz/fuzz',
  'generate-cli',
  'llamacpp-quant',
  'llamacpp',
  'spec/spin',
  'structured/structured-outputs',
].map((name) => join('dist/test', `${name}.test.js`));

function collect(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return collect(path);
    return entry.name.endsWith('.test.js') ? [path] : [];
  });
}

const all = [...collect('dist/src'), ...collect('dist/test')].sort();
const missing = [...TIMED_UNITS, ...SIDE_BY_SIDE].filter((listed) => !all.includes(listed));
if (missing.length > 0) {
  console.error(`scripts/run-tests.mjs names test files that do not exist: ${missing.join(', ')}`);
  process.exit(1);
}
const filters = process.argv.slice(2);
const files = all.filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)));
if (files.length === 0) {
  console.error(`no test files under dist/${filters.length > 0 ? ` match ${filters.join(', ')}` : ''}`);
  process.exit(1);
}
const sideBySide = (file) =>
  (file.startsWith('dist/src/') && !TIMED_UNITS.includes(file)) || SIDE_BY_SIDE.includes(file);

// `--test-concurrency` came in Node 20.10; without it node runs a file a core at a time, so older versions get one
// `node --test` a file, in turn
const [major, minor] = process.versions.node.split('.').map(Number);
const phases =
  major > 20 || (major === 20 && minor >= 10)
    ? [
        { files: files.filter(sideBySide), flags: ['--test-concurrency=2'], what: '2 at a time' },
        { files: files.filter((file) => !sideBySide(file)), flags: ['--test-concurrency=1'], what: 'one at a time' },
      ]
    : files.map((file) => ({ files: [file], flags: [], what: 'alone (Node before 20.10)' }));
let status = 0;
for (const phase of phases) {
  if (phase.files.length === 0) continue;
  const count = phase.files.length;
  console.log(`\n# ${count} test file${count === 1 ? '' : 's'}, ${phase.what}\n`);
  const args = ['--test', ...phase.flags, '--test-reporter=spec', ...phase.files];
  const result = spawnSync(process.execPath, args, { stdio: 'inherit' });
  if (result.status !== 0) status = result.status ?? 1;
}
process.exit(status);
