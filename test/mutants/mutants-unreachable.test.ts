/**
 * The seeded isolation mutants (README.md) cannot be turned on by the production path: no `kvfence` command shows or
 * accepts a flag for them, and no production module imports anything from test/, reads a test-only environment
 * variable, or has a mutant option at all. A mutant exists only as a test subclass handed to a worker as a part.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from '../helpers/cli.js';

const SRC = fileURLToPath(new URL('../../../src', import.meta.url));

/** Names of the seeded faults (seeded-faults.ts): none may appear in a production module. */
const FAULT_NAMES = [
  'oversizePlaceholder',
  'ownershipUnchecked',
  'epochUnchecked',
  'cancelLeavesRunning',
  'abortAsSuccess',
  'checksumUnchecked',
  'sharedStaging',
  'staleIndex',
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
    for (const option of FAULT_NAMES) {
      const flag = option.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
      assert.ok(!r.stdout.includes(flag), `kvfence ${command} --help offers --${flag}`);
    }
  }
  const r = runCli(['serve', '--mutants', 'placeholder', '--port', '0']);
  assert.notEqual(r.status, 0, 'an unknown flag is refused before anything starts');
  assert.match(r.stderr, /unknown option '--mutants'/);
});

test('production modules have no fault switch: no test import, no mutant option, no test variable', () => {
  const files = sourceFiles(SRC).filter((file) => !file.endsWith('.test.ts'));
  assert.ok(files.length > 50, `found the sources under ${SRC}`);
  for (const file of files) {
    const name = relative(SRC, file).split('\\').join('/');
    const text = readFileSync(file, 'utf8');
    assert.doesNotMatch(text, /from '[^']*\/test\//, `${name} imports from test/`);
    assert.doesNotMatch(text, /KVFENCE_TEST_|KVFENCE_[A-Z_]*MUTA/, `${name} reads a test-only environment variable`);
    assert.doesNotMatch(text, /\bmutants\??\s*:|[A-Za-z]Mutants\b/, `${name} has a mutants option or type`);
    for (const fault of FAULT_NAMES) assert.ok(!text.includes(fault), `${name} names the seeded fault ${fault}`);
  }
});
