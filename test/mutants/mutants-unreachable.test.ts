/**
 * The seeded isolation mutants (README.md) cannot be turned on by the production path: no `kvfence` command shows or
 * accepts a flag for them, no module under src/ imports test/mutants/, no environment variable names them, and the
 * `mutants` options are read only at the hook points listed here (each marked "mutation self-test hook"), never by the
 * CLI that builds the production servers.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from '../helpers/cli.js';

const SRC = fileURLToPath(new URL('../../../src', import.meta.url));

/** The only production files that may mention the mutants: the hook points (and the pool's and cache's own tests). */
const HOOK_FILES = new Set([
  'engine/engine.ts',
  'gateway/completion-run.ts',
  'gateway/server.ts',
  'kv/page-pool.ts',
  'kv/page-pool.model.test.ts',
  'kv/prefix-cache.ts',
  'kv/prefix-cache.model.test.ts',
  'kv/prefix-cache.test.ts',
  'colocated/colocated-worker.ts',
  'prefill/prefill-worker.ts',
  'cluster/worker-process.ts',
  'transfer/receive-session.ts',
  'transfer/transfer-receiver.ts',
]);

const MUTANT_OPTIONS = [
  'oversizePlaceholder',
  'ownershipUnchecked',
  'epochUnchecked',
  'cancelLeavesRunning',
  'abortAsSuccess',
  'digestUnchecked',
  'sharedStaging',
  'evictionKeepsIndex',
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

test('no kvfence command offers a mutant flag', () => {
  for (const command of ['serve', 'gateway', 'prefill', 'decode', 'generate', 'audit']) {
    const r = runCli([command, '--help']);
    assert.equal(r.status, 0, `${command} --help: ${r.stderr}`);
    assert.doesNotMatch(r.stdout, /mutant|mutation/i, `kvfence ${command} --help`);
    for (const option of MUTANT_OPTIONS) {
      const flag = option.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
      assert.ok(!r.stdout.includes(flag), `kvfence ${command} --help offers --${flag}`);
    }
  }
  const r = runCli(['serve', '--mutants', 'placeholder', '--port', '0']);
  assert.notEqual(r.status, 0, 'an unknown flag is refused before anything starts');
  assert.match(r.stderr, /unknown option '--mutants'/);
});

test('production modules neither import test/mutants nor read the mutants outside the hook points', () => {
  const files = sourceFiles(SRC);
  assert.ok(files.length > 50, `found the sources under ${SRC}`);
  for (const file of files) {
    const name = relative(SRC, file).split('\\').join('/');
    const text = readFileSync(file, 'utf8');
    assert.doesNotMatch(text, /from '[^']*test\/mutants/, `${name} imports test/mutants`);
    assert.doesNotMatch(text, /KVFENCE_[A-Z_]*MUTA/, `${name} names a mutant environment variable`);
    const mentions = /\bmutants\b/.test(text) || MUTANT_OPTIONS.some((o) => text.includes(o));
    if (HOOK_FILES.has(name)) {
      if (!name.endsWith('.test.ts'))
        assert.match(text, /mutation self-test hook: see test\/mutants\//, `${name} marks its hook`);
    } else assert.ok(!mentions, `${name} mentions the mutants but is not a hook point`);
  }
  // the CLI builds every production server and worker; it never mentions them (checked above), so none has a mutant
  assert.ok(![...HOOK_FILES].some((name) => name.startsWith('cli/')));
});
