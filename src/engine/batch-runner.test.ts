import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { costlyConstraint, whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { forwardFor } from '../../test/helpers/models.js';
import { grammarCacheFor } from '../structured/grammar-cache.js';
import { KvfenceError } from '../util/errors.js';
import { BatchRunner } from './batch-runner.js';
import { Engine } from './engine.js';
import type { GenerationEnd } from './request.js';

test('a sink that throws on a token ends its request as failed, once, and its pages are free; others run on', async () => {
  const forward = forwardFor(model, 64, 16);
  const warnings: string[] = [];
  const log = { info: () => {}, warn: (_: object, message: string) => warnings.push(message), error: () => {} };
  const runner = new BatchRunner({ engine: new Engine(config(), forward), onIncident: () => {}, log, now: Date.now });
  const ends = new Map<string, GenerationEnd[]>();
  const tokens = new Map<string, number>();
  const done = (id: string, count: number) =>
    new Promise<void>((resolve) => {
      const sink = {
        onToken: () => {
          tokens.set(id, (tokens.get(id) ?? 0) + 1);
          if (id === 'broken') throw new Error('the socket is gone');
        },
        onEnd: (end: GenerationEnd) => {
          ends.set(id, [...(ends.get(id) ?? []), end]);
          resolve();
        },
      };
      runner.submit(request(id, 't', 5, count), sink);
    });
  // the owner (a decode worker) lets go of its record only when it hears the ending: it must hear one
  await Promise.all([done('broken', 20), done('fine', 12)]);
  assert.deepEqual(
    ends.get('broken')?.map((e) => (e.kind === 'failed' ? e.error.code : e.kind)),
    ['internal_error'],
  );
  assert.equal(tokens.get('broken'), 1, 'nothing after the token it could not take');
  assert.deepEqual(
    ends.get('fine')?.map((e) => e.kind),
    ['finished'],
  );
  assert.equal(tokens.get('fine'), 12);
  assert.deepEqual(warnings, ['delivering to a request failed; cancelling it']);
  assert.equal(runner.engine.hasWork, false);
  assert.equal(forward.pool.checkConservation().free, 64);
  runner.close(new KvfenceError('worker_unavailable', 'done'));
});

test('a response format’s grammar is built off the step loop; a request waiting for it cancels and closes cleanly', async () => {
  const forward = forwardFor(model, 64, 16);
  const quiet = { info: () => {}, warn: () => {}, error: () => {} };
  const engine = new Engine(config({ grammars: grammarCacheFor(model.tokenizer) }), forward);
  const runner = new BatchRunner({ engine, onIncident: () => {}, log: quiet, now: Date.now });
  // built where the engine steps, every tenant's next token waited for it
  const { inlineMs } = costlyConstraint('warm');
  const constrained = (id: string) => ({ ...request(id, 't', 5, 8), constraint: costlyConstraint(id).constraint });
  const ends: GenerationEnd[] = [];
  const sink = (resolve?: () => void) => ({
    onToken: () => {},
    onEnd: (end: GenerationEnd) => {
      ends.push(end);
      resolve?.();
    },
  });
  try {
    const costly = constrained('costly');
    const { longestGapMs } = await whileTicking(
      () => new Promise<void>((resolve) => runner.submit(costly, sink(resolve))),
    );
    assert.ok(
      longestGapMs < inlineMs / 2,
      `the loop stalled ${longestGapMs.toFixed(0)} ms (a build: ${inlineMs.toFixed(0)} ms)`,
    );
    assert.notEqual(ends[0]?.kind, 'failed', JSON.stringify(ends[0]));
    // cancelled while its grammar is built: nothing reaches its sink, nothing reaches the engine
    runner.submit(constrained('cancelled'), sink());
    runner.cancel('cancelled');
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(ends.length, 1);
    assert.equal(engine.hasWork, false);
    runner.submit(constrained('closing'), sink());
    runner.close(new KvfenceError('worker_unavailable', 'shutting down'));
    assert.deepEqual(
      ends.slice(1).map((e) => (e.kind === 'failed' ? e.error.code : e.kind)),
      ['worker_unavailable'],
    );
    assert.equal(forward.pool.checkConservation().free, 64);
  } finally {
    runner.close(new KvfenceError('worker_unavailable', 'done'));
  }
});
