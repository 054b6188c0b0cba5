// The prefill worker's engine shares each step's prompt tokens equally among tenants (I11), as the colocated one does:
// a tenant's many prompts cannot push another tenant's prompt to the back of the line.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { PrefillEngine } from './prefill-engine.js';

/** The step at which each request's prompt was in the KV. */
function prefilledAt(engine: PrefillEngine): Map<string, number> {
  const at = new Map<string, number>();
  for (let step = 1; engine.hasWork; step++) {
    assert.ok(step < 100, 'prefill finished within the step bound');
    for (const event of engine.step(0)) {
      assert.equal(event.kind, 'prefilled');
      if (event.kind !== 'prefilled') continue;
      at.set(event.prefilled.request.id, step);
      event.prefilled.release();
    }
  }
  return at;
}

test('one tenant with three prompts, another with one: the one is done as soon as the first of the three', () => {
  const forward = forwardFor(model, 64, 16);
  const engine = new PrefillEngine(config({ prefillChunkTokens: 8, stepTokenBudget: 16 }), forward, undefined);
  for (const id of ['x1', 'x2', 'x3']) engine.submit(request(id, 'x', 24, 1), 0);
  engine.submit(request('y1', 'y', 24, 1), 0);
  const at = prefilledAt(engine);
  // 8 tokens a step for each tenant: y1 and x1 after 3 steps (first-come-first-served would finish y1 after 6); then
  // x takes the whole budget, a chunk for each of x2 and x3
  assert.deepEqual([...at.entries()].sort(), [
    ['x1', 3],
    ['x2', 6],
    ['x3', 6],
    ['y1', 3],
  ]);
  assert.equal(forward.pool.checkConservation().free, 64);
});
