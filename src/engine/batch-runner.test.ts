import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
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
