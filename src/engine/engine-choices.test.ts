// n > 1 inside the engine: the choices share the prompt's whole pages read-only (one prefill), each is exactly the
// request it would be alone with its own seed, and every page comes back when the request ends, fails or is cancelled.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { choiceRequest, requestPages } from './choice-group.js';
import { Engine } from './engine.js';
import type { EngineEvent, GenerationRequest } from './request.js';

const PAGE = 16;

/** Steps to the end, collecting (token, logprob) per choice and the endings. */
function run(engine: Engine, events: EngineEvent[] = []) {
  const choices = new Map<string, number[][]>();
  for (let step = 0; engine.hasWork; step++) {
    assert.ok(step < 2000, 'within the step bound');
    events.push(...engine.step(0));
  }
  for (const e of events) {
    if (e.kind !== 'token') continue;
    const per = choices.get(e.request) ?? choices.set(e.request, []).get(e.request)!;
    per[e.choice] = [...(per[e.choice] ?? []), e.token.id, e.token.logprob];
  }
  return { choices, ends: events.filter((e) => e.kind === 'end') };
}

/** Steps until the request's choices have forked (all n running). */
function stepToFork(engine: Engine, id: string, n: number, events: EngineEvent[]): void {
  for (let step = 0; engine.runningTable(id, n - 1) === undefined; step++) {
    assert.ok(step < 100, 'the choices fork');
    events.push(...engine.step(0));
  }
}

function seeded(id: string, promptLength: number, maxTokens: number, n: number): GenerationRequest {
  const r = request(id, 'a', promptLength, maxTokens);
  return { ...r, sampling: { temperature: 1.1, topK: 0, topP: 0.95, seed: 41 }, choices: n };
}

test('n choices: choice i is the request alone with seed + i, its prompt prefilled once into pages they share', () => {
  for (const promptLength of [37, 48]) {
    // 37: each choice copies the partial last prompt page into its own tail; 48: whole pages only
    const forward = forwardFor(model, 64, PAGE);
    const engine = new Engine(config(), forward);
    const group = seeded('g', promptLength, 20, 3);
    engine.submit(group, 0);
    const events: EngineEvent[] = [];
    stepToFork(engine, 'g', 3, events);
    assert.equal(forward.pool.usedPageCount, requestPages(PAGE, promptLength, 20, 3), 'head once, a tail per choice');
    const head = Math.floor(promptLength / PAGE);
    const [leader, ...others] = [0, 1, 2].map((c) => engine.runningTable('g', c)!);
    for (const table of others) {
      assert.deepEqual(table.pages.slice(0, head), leader!.pages.slice(0, head), 'the same head pages');
      assert.equal(table.sharedPages, head, 'read-only in the choice');
      assert.equal(
        new Set([...table.pages.slice(head), ...leader!.pages.slice(head)]).size,
        2 * (table.pages.length - head),
      );
    }
    const { choices, ends } = run(engine, events);
    const got = choices.get('g')!;
    for (let c = 0; c < 3; c++) {
      const alone = new Engine(config(), forwardFor(model, 64, PAGE));
      alone.submit({ ...choiceRequest(group, c), choices: 1 }, 0);
      assert.deepEqual(got[c], run(alone).choices.get('g')![0], `choice ${c} of a ${promptLength}-token prompt`);
    }
    assert.notDeepEqual(got[0], got[1], 'seeded choices differ');
    assert.deepEqual(ends, [
      {
        kind: 'end',
        request: 'g',
        end: {
          kind: 'finished',
          reason: 'length',
          promptTokens: promptLength,
          completionTokens: 60,
          choices: [0, 1, 2].map(() => ({ reason: 'length', completionTokens: 20 })),
        },
      },
    ]);
    assert.equal(forward.pool.checkConservation().free, 64, 'every page back');
  }
});

test('a write into the shared head is refused; a stale head page in one choice fails the whole request', () => {
  const forward = forwardFor(model, 64, PAGE);
  const engine = new Engine(config(), forward);
  engine.submit(seeded('g', 40, 30, 2), 0);
  const events: EngineEvent[] = [];
  stepToFork(engine, 'g', 2, events);
  const choice = engine.runningTable('g', 1)!;
  assert.throws(() => forward.pool.markWritten({ ...choice, writtenTokens: 0 }, 16), /read-only shared/);
  choice.epochs[1] = choice.epochs[1]! + 1; // as if the head page were freed and granted again under the choice
  const { ends } = run(engine, events);
  assert.equal(events.filter((e) => e.kind === 'incident').length, 1);
  assert.equal(ends.length, 1, 'one ending (I6)');
  assert.equal(
    ends[0]!.kind === 'end' && ends[0]!.end.kind === 'failed' && ends[0]!.end.error.code,
    'kv_isolation_violation',
  );
  assert.equal(forward.pool.checkConservation().free, 64);
});

test('admission takes n batch slots and the whole need; a cancel mid-decode frees the head and every tail', () => {
  const forward = forwardFor(model, 64, PAGE);
  const engine = new Engine(config({ runningMax: 4 }), forward);
  engine.submit(seeded('g', 20, 40, 3), 0);
  engine.submit(request('other', 'b', 10, 5), 0);
  engine.submit(request('third', 'c', 10, 5), 0);
  stepToFork(engine, 'g', 3, []);
  assert.deepEqual([engine.stats().running, engine.stats().waiting], [4, 1], 'third waits for a slot, not a page');
  assert.equal(engine.cancel('g'), true);
  assert.deepEqual([engine.runningRequestsOf('a'), engine.stats().tenants.has('a')], [[], false]);
  run(engine);
  assert.equal(forward.pool.checkConservation().free, 64);
  assert.throws(() => engine.submit(seeded('big', 20, 10, 5), 0), /n must be an integer from 1 to 4/);
});

test('forked choices pause for another tenant, each as it is alone; a cancel frees the paused choice too', () => {
  const forward = forwardFor(model, 64, PAGE);
  const engine = new Engine(config({ runningMax: 4 }), forward);
  const groups = [
    seeded('g1', 20, 30, 2),
    { ...seeded('g2', 12, 30, 2), sampling: { ...seeded('g2', 12, 30, 2).sampling, seed: 7 } },
  ];
  for (const g of groups) engine.submit(g, 0);
  const events: EngineEvent[] = [];
  stepToFork(engine, 'g1', 2, events);
  stepToFork(engine, 'g2', 2, events);
  // a's two requests hold all four slots as four choices: one of them pauses for b's, which runs the next step
  engine.submit(request('b', 'b', 6, 4), 0);
  events.push(...engine.step(0));
  assert.equal(engine.pausedRequests().length, 1, "one of a's choices paused");
  assert.ok(
    events.some((e) => e.kind === 'token' && e.request === 'b'),
    "b's first token at once, not when one of a's requests ends",
  );
  const { choices, ends } = run(engine, events);
  for (const g of groups)
    for (let c = 0; c < 2; c++) {
      const alone = new Engine(config(), forwardFor(model, 64, PAGE));
      alone.submit({ ...choiceRequest(g, c), choices: 1 }, 0);
      assert.deepEqual(choices.get(g.id)![c], run(alone).choices.get(g.id)![0], `${g.id} choice ${c}`);
    }
  assert.deepEqual(ends.map((e) => e.kind === 'end' && e.request).sort(), ['b', 'g1', 'g2'], 'one ending each (I6)');
  assert.equal(forward.pool.checkConservation().free, 64);

  // cancelled with one choice paused: every page back, the head and both tails
  for (const g of groups) engine.submit(g, 0);
  stepToFork(engine, 'g1', 2, []);
  stepToFork(engine, 'g2', 2, []);
  engine.submit(request('b', 'b', 6, 40), 0);
  engine.step(0);
  const [pausedId] = engine.pausedRequests();
  assert.ok(pausedId !== undefined && engine.cancel(pausedId));
  assert.deepEqual(engine.pausedRequests(), []);
  assert.equal(engine.runningTable(pausedId, 0) ?? engine.runningTable(pausedId, 1), undefined, 'both choices gone');
  run(engine);
  assert.equal(forward.pool.checkConservation().free, 64);
});

test('an answer its client ended (endChoice) stops at once: its tail back, the others run on, one ending', () => {
  const forward = forwardFor(model, 64, PAGE);
  const engine = new Engine(config(), forward);
  const group = seeded('g', 20, 30, 3);
  engine.submit(group, 0);
  const events: EngineEvent[] = [];
  stepToFork(engine, 'g', 3, events);
  events.push(...engine.step(0), ...engine.step(0)); // two more tokens each
  const used = forward.pool.usedPageCount;
  const tail = engine.runningTable('g', 1)!.pages.length - Math.floor(20 / PAGE);
  assert.deepEqual(engine.endChoice('g', 1), [], 'not the last choice: no ending yet');
  assert.equal(forward.pool.usedPageCount, used - tail, 'its own pages are back');
  assert.equal(engine.runningTable('g', 1), undefined);
  assert.deepEqual(engine.endChoice('g', 1), [], 'once');
  assert.deepEqual(engine.endChoice('nobody', 0), []);
  const { choices, ends } = run(engine, events);
  const got = choices.get('g')!;
  assert.equal(got[1]!.length / 2, 3, 'choice 1 stopped after its 3 tokens');
  assert.equal(got[0]!.length / 2, 30);
  assert.equal(ends.length, 1, 'one ending (I6)');
  const end = ends[0]!.kind === 'end' ? ends[0]!.end : undefined;
  assert.ok(end?.kind === 'finished');
  assert.deepEqual(end.choices?.[1], { reason: 'stop', completionTokens: 3 });
  assert.equal(forward.pool.checkConservation().free, 64, 'every page back');

  const alone = new Engine(config(), forwardFor(model, 64, PAGE));
  alone.submit(request('one', 'a', 20, 5), 0);
  alone.step(0);
  assert.deepEqual(alone.endChoice('one', 0), [], 'a request of one answer is cancelled, not ended by choice');
  assert.equal(run(alone).choices.get('one')![0]!.length / 2, 5);
});
