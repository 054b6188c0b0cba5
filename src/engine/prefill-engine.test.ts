// The prefill worker's engine shares each step's prompt tokens equally among tenants (I11), as the colocated one does:
// a tenant's many prompts cannot push another tenant's prompt to the back of the line.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { PrefillEngine, type Prefilled } from './prefill-engine.js';
import { STALL_POLL_MS, StepLoop } from './step-loop.js';

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

test('a request queued for pages still on the wire is looked at every few ms, not on every event-loop turn', async () => {
  // 16 pages of 16 tokens: one 250-token prompt takes them all, so the second waits for the first's transfer
  const forward = forwardFor(model, 16, 16);
  const engine = new PrefillEngine(
    config({ prefillChunkTokens: 256, stepTokenBudget: 256, queueTimeoutMs: 10_000 }),
    forward,
    undefined,
  );
  let steps = 0;
  let held: Prefilled | undefined;
  const counted = {
    get hasWork() {
      return engine.hasWork;
    },
    get stalled() {
      return engine.stalled;
    },
    step(now: number) {
      steps++;
      return engine.step(now);
    },
  };
  const loop = new StepLoop(counted, (events) => {
    for (const e of events) if (e.kind === 'prefilled') held = e.prefilled;
  });
  try {
    engine.submit(request('a', 't1', 250, 1), Date.now());
    engine.submit(request('b', 't2', 250, 1), Date.now());
    loop.kick();
    const waitMs = 300;
    await new Promise((r) => setTimeout(r, waitMs));
    assert.ok(held !== undefined && held.request.id === 'a', 'the first prompt is prefilled and its pages held');
    assert.equal(engine.waitingCount, 1);
    assert.ok(engine.stalled);
    // about one look every STALL_POLL_MS (timers may run late, never early); it spun ~280,000 times before
    assert.ok(steps <= waitMs / STALL_POLL_MS + 5, `${steps} steps in ${waitMs} ms while stalled`);
    held.release(); // no kick: the loop's next look admits it
    const released = performance.now();
    while (engine.waitingCount > 0) {
      assert.ok(performance.now() - released < 2_000, 'the queued request is admitted once the pages are back');
      await new Promise((r) => setTimeout(r, 1));
    }
  } finally {
    loop.stop();
  }
});
