import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Command } from 'commander';
import { parseWorkerStart } from '../cluster/worker-config.js';
import { addFlags, type ParsedFlags, type ServingCommand, serveConfigOf, workerConfigOf } from './flags.js';

function parse(name: ServingCommand, args: string[]): ParsedFlags {
  return addFlags(new Command(name).exitOverride(), name).parse(args, { from: 'user' }).opts<ParsedFlags>();
}

test('Q5_0 weights are widened unless --keep-q5-0: serve, a worker, and the start message a supervisor sends', () => {
  assert.equal(serveConfigOf(parse('serve', [])).widenQ5_0, true);
  assert.equal(serveConfigOf(parse('serve', ['--keep-q5-0'])).widenQ5_0, false);
  const resolved = { modelPath: 'm.gguf', modelName: 'm', pageCount: 4 };
  for (const keep of [false, true]) {
    const config = workerConfigOf('decode', parse('decode', keep ? ['--keep-q5-0'] : []), resolved);
    assert.equal(config.widenQ5_0, !keep);
    const start = parseWorkerStart(JSON.parse(JSON.stringify({ kind: 'start', config, secretHex: '00' })));
    assert.equal(start.config.widenQ5_0, !keep);
  }
  const config = { ...workerConfigOf('prefill', parse('prefill', []), resolved), widenQ5_0: 'no' };
  assert.throws(() => parseWorkerStart({ kind: 'start', config, secretHex: '00' }), /widenQ5_0/);
});

test('--q8-activations reaches serve, a worker, and the start message a supervisor sends; off by default', () => {
  assert.equal(serveConfigOf(parse('serve', [])).q8Activations, false);
  assert.equal(serveConfigOf(parse('serve', ['--q8-activations'])).q8Activations, true);
  // its products read Q5_0 as stored (the same results as widened)
  assert.equal(serveConfigOf(parse('serve', ['--q8-activations'])).widenQ5_0, false);
  const resolved = { modelPath: 'm.gguf', modelName: 'm', pageCount: 4 };
  for (const on of [false, true]) {
    const config = workerConfigOf('prefill', parse('prefill', on ? ['--q8-activations'] : []), resolved);
    assert.equal(config.q8Activations, on);
    const start = parseWorkerStart(JSON.parse(JSON.stringify({ kind: 'start', config, secretHex: '00' })));
    assert.equal(start.config.q8Activations, on);
  }
  const config = { ...workerConfigOf('decode', parse('decode', []), resolved), q8Activations: 1 };
  assert.throws(() => parseWorkerStart({ kind: 'start', config, secretHex: '00' }), /q8Activations/);
});
