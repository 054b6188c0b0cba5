// Runs every compiled test file (dist/**/*.test.js) with node's built-in test runner. Node 20's `--test` has no globs,
// so the list is gathered here. Optional arguments filter by substring of the path.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

function collect(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return collect(path);
    return entry.name.endsWith('.test.js') ? [path] : [];
  });
}

const filters = process.argv.slice(2);
const files = [...collect('dist/src'), ...collect('dist/test')]
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)))
  .sort();
if (files.length === 0) {
  console.error('no test files found under dist/');
  process.exit(1);
}
const result = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
