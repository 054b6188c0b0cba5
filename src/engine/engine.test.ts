import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request, runToEnd } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { grammarCacheFor } from '../structured/grammar-cache.js';
import { KvfenceError } from '../util/errors.js';
import { Engine } from './engine.js';
import { generate } from './generate.js';
import type { GeneratedToken } from './request.js';
import { GREEDY } from './sampler.js';

test('continuous batching gives every request exactly what it gets alone, and the pool ends whole', () => {
  const forward = forwardFor(model, 64, 16);
  const engine = new Engine(config(), forward);
  const shapes: [number, number][] = [
    [5, 12],
    [40, 3],
    [17, 20],
    [1, 9],
    [63, 6],
    [9, 1],
  ];
  const requests = shapes.map(([p, m], i) => request(`r${i}`, `t${i % 3}`, p, m));
  // requests arrive while others run: two now, the rest a few steps later
  engine.submit(requests[0]!, 0);
  engine.submit(requests[1]!, 0);
  const outcomes = runToEnd(engine, 0, 5000, (step) => {
    if (step === 3) for (const r of requests.slice(2)) engine.submit(r, 0);
  });
  for (const r of requests) {
    const solo = generate(forwardFor(model, 64, 16), r.promptTokens, {
      maxTokens: r.maxTokens,
      sampling: GREEDY,
      prefillChunkTokens: 64,
      isStopToken: () => false,
    });
    const got = outcomes.get(r.id)!;
    assert.deepEqual(got.tokens, solo.tokens, `${r.id} tokens`);
    assert.deepEqual(got.logprobs, solo.logprobs, `${r.id} logprobs`);
    assert.deepEqual(got.end, {
      kind: 'end',
      request: r.id,
      end: { kind: 'finished', reason: 'length', promptTokens: r.promptTokens.length, completionTokens: r.maxTokens },
    });
  }
  assert.equal(forward.pool.checkConservation().free, 64);
});

test('admission reserves the whole need: a request that does not fit waits, then runs when pages free up', () => {
  const forward = forwardFor(model, 16, 16); // 256 tokens: one full-context request at a time
  const engine = new Engine(config(), forward);
  engine.submit(request('big', 'a', 100, 150), 0); // 250 tokens: 16 pages
  engine.submit(request('small', 'b', 4, 4), 0);
  engine.step(0);
  assert.equal(engine.stats().running, 1);
  assert.equal(engine.stats().waiting, 1);
  assert.equal(forward.pool.freePageCount, 0);
  const outcomes = runToEnd(engine);
  assert.equal(outcomes.get('small')!.tokens.length, 4);
  assert.equal(forward.pool.checkConservation().free, 16);
});

test('the tenant page quota holds a flooding tenant back without blocking others', () => {
  const forward = forwardFor(model, 64, 16);
  const engine = new Engine(config(), forward);
  // the quota travels with each request (the gateway's tenant table): 20 pages
  for (let i = 0; i < 4; i++) engine.submit(request(`flood${i}`, 'flood', 200, 40, 20), 0); // 15 pages each
  engine.submit(request('quiet', 'quiet', 3, 2, 20), 0);
  engine.step(0);
  assert.deepEqual(engine.runningRequestsOf('flood'), ['flood0']);
  assert.deepEqual(engine.runningRequestsOf('quiet'), ['quiet']);
  let maxFloodPages = 0;
  runToEnd(engine, 0, 5000, () => {
    maxFloodPages = Math.max(maxFloodPages, forward.pool.pagesOfTenant('flood'));
  });
  assert.ok(maxFloodPages <= 20, `flood held ${maxFloodPages} pages`);
});

test('a tenant inside its limits filling the batch, or the pool, does not keep another out (I11)', () => {
  /** The step at which each request's first token came, running `engine` to its end. */
  const firstTokens = (engine: Engine, later: () => void) => {
    const first = new Map<string, number>();
    for (let step = 0; engine.hasWork; step++) {
      assert.ok(step < 5000, 'within the step bound');
      if (step === 3) later();
      for (const e of engine.step(0)) if (e.kind === 'token' && !first.has(e.request)) first.set(e.request, step);
    }
    return first;
  };
  // the batch: a's eight long requests (within its quota; ending one at a time) against four slots; b's comes at step 3
  const slots = new Engine(config({ runningMax: 4 }), forwardFor(model, 64, 16));
  for (let i = 0; i < 8; i++) slots.submit(request(`a${i}`, 'a', 8, 20 + 4 * i), 0);
  const bySlots = firstTokens(slots, () => slots.submit(request('b', 'b', 8, 3), 0));
  // one of a's sequences pauses: b's prompt (8 tokens, a chunk of 7 a step) runs at once, not after a0's 20 tokens
  assert.equal(bySlots.get('b'), 4, `b's first token the step after its prompt: ${[...bySlots]}`);
  // the pool: a's requests hold nearly all of it and its next waits for pages; b's one page passes that one
  const pool = new Engine(config({ runningMax: 8 }), forwardFor(model, 30, 16));
  for (let i = 0; i < 4; i++) pool.submit(request(`a${i}`, 'a', 100, 28), 0); // 8 pages each: 3 fit in 30
  const byPages = firstTokens(pool, () => pool.submit(request('b', 'b', 3, 3), 0));
  assert.ok(byPages.get('b')! < byPages.get('a3')!, `b's first token before a's fourth: ${[...byPages]}`);
});

test('a paused sequence resumes where it stopped: every answer as it is alone, the pool whole; cancel frees it', () => {
  const forward = forwardFor(model, 64, 16);
  const engine = new Engine(config({ runningMax: 3 }), forward);
  const requests = [request('a0', 'a', 9, 30), request('a1', 'a', 5, 30), request('a2', 'a', 12, 30)];
  for (const r of requests) engine.submit(r, 0);
  const late = [request('b0', 'b', 6, 4), request('c0', 'c', 4, 30)];
  const pausedSeen = new Set<string>();
  const outcomes = runToEnd(engine, 0, 5000, (step) => {
    if (step === 6) for (const r of late) engine.submit(r, 0);
    for (const id of engine.pausedRequests()) pausedSeen.add(id);
  });
  // b and c each took a slot from a (3 of 3) the step they came, and a's youngest paused for each
  assert.deepEqual([...pausedSeen].sort(), ['a1', 'a2']);
  for (const r of [...requests, ...late]) {
    const solo = generate(forwardFor(model, 64, 16), r.promptTokens, {
      maxTokens: r.maxTokens,
      sampling: GREEDY,
      prefillChunkTokens: 64,
      isStopToken: () => false,
    });
    assert.deepEqual(outcomes.get(r.id)!.tokens, solo.tokens, `${r.id} tokens`);
  }
  assert.equal(forward.pool.checkConservation().free, 64);
  // a paused request cancelled: its pages back at once
  engine.submit(request('x0', 'x', 4, 40), 0);
  engine.submit(request('x1', 'x', 4, 40), 0);
  engine.submit(request('x2', 'x', 4, 40), 0);
  engine.step(0);
  engine.submit(request('y0', 'y', 4, 40), 0);
  engine.step(0);
  assert.deepEqual(engine.pausedRequests(), ['x2']);
  const held = forward.pool.pagesOfTenant('x');
  assert.ok(engine.cancel('x2'));
  assert.equal(forward.pool.pagesOfTenant('x'), held - 3);
  assert.deepEqual([engine.pausedRequests(), engine.runningRequestsOf('x')], [[], ['x0', 'x1']]);
  runToEnd(engine);
  assert.equal(forward.pool.checkConservation().free, 64);
});

test('a paused sequence holding the pages another waits for is not left paused: both end, neither fails', () => {
  // a1 pauses for b0; b1 then wants more pages than a1's paused ones leave. Held behind b1, a1 would stay paused with
  // the batch empty until b1's queue timeout: b1 a 503 though it fits once a1 ends, a1 idle meanwhile.
  const forward = forwardFor(model, 24, 16);
  const engine = new Engine(config({ runningMax: 2, queueTimeoutMs: 2000 }), forward);
  engine.submit(request('a0', 'a', 8, 40), 0); // 3 pages
  engine.submit(request('a1', 'a', 8, 200), 0); // 13 pages
  let now = 0;
  const ends = new Map<string, { step: number; kind: string }>();
  const step = () => {
    for (const e of engine.step(now)) if (e.kind === 'end') ends.set(e.request, { step: now, kind: e.end.kind });
    now++;
  };
  for (let i = 0; i < 3; i++) step();
  engine.submit(request('b0', 'b', 4, 4), now); // 1 page: a1 pauses for it
  step();
  assert.deepEqual(engine.pausedRequests(), ['a1']);
  engine.submit(request('b1', 'b', 8, 180), now); // 12 pages: 11 are free once a0 and b0 end
  while (engine.hasWork && now < 1000) {
    step();
    if (ends.has('b0') && ends.get('b0')!.step < now - 1)
      assert.deepEqual(engine.pausedRequests(), [], 'a1 takes the slot b0 frees, at the next step');
  }
  assert.deepEqual(
    ['a0', 'a1', 'b0', 'b1'].map((id) => ends.get(id)?.kind),
    ['finished', 'finished', 'finished', 'finished'],
  );
  assert.ok(ends.get('b1')!.step < 500, `b1 ends at step ${ends.get('b1')!.step}, after a1's 200 tokens`);
  assert.deepEqual(forward.pool.checkConservation(), { free: 24, reserved: 0, active: 0 });
});

test('paused sequences resume under other tenants’ steady streams: their turn is by slots, not the pages they hold', () => {
  // a's four requests (7 pages each) fill the batch; b, c and d each keep two short requests waiting. Three of a's
  // pause. Ordered by the 21 pages they hold (a third of the pool), a's turn never came: each of b, c, d holding one
  // slot (a quarter) got the next, as long as they kept sending.
  const forward = forwardFor(model, 64, 16);
  const engine = new Engine(config({ runningMax: 4, waitingMax: 64 }), forward);
  for (let i = 0; i < 4; i++) engine.submit(request(`a${i}`, 'a', 8, 100), 0);
  const sent = new Map<string, number>();
  const send = (tenant: string) => {
    const i = sent.get(tenant) ?? 0;
    sent.set(tenant, i + 1);
    engine.submit(request(`${tenant}${i}`, tenant, 4, 8), 0);
  };
  for (let i = 0; i < 3; i++) engine.step(0);
  for (const tenant of ['b', 'c', 'd']) for (let i = 0; i < 2; i++) send(tenant);
  const aEnds = new Map<string, number>();
  for (let step = 0; step < 800 && aEnds.size < 4; step++) {
    if (step === 1) assert.deepEqual(engine.pausedRequests(), ['a3', 'a2', 'a1'], 'a pauses one for each of b, c, d');
    for (const e of engine.step(0)) {
      if (e.kind !== 'end') continue;
      assert.equal(e.end.kind, 'finished');
      if (e.request.startsWith('a')) aEnds.set(e.request, step);
      else send(e.request[0]!); // the stream goes on
    }
  }
  // a holds one slot of four, as each of b, c, d: its requests end one after another, about 100 steps apart
  assert.equal(aEnds.size, 4, `a's requests ended: ${[...aEnds.keys()]}`);
  assert.ok(Math.max(...aEnds.values()) < 500, `a's last ends at step ${Math.max(...aEnds.values())}`);
  runToEnd(engine);
  assert.deepEqual(forward.pool.checkConservation(), { free: 64, reserved: 0, active: 0 });
});

test("a tenant's pauses go round its sequences: the one paused fewest times first, not the one that resumed last", () => {
  const engine = new Engine(config({ runningMax: 3 }), forwardFor(model, 64, 16));
  for (let i = 0; i < 3; i++) engine.submit(request(`a${i}`, 'a', 4, 60), 0);
  const pauses: string[] = [];
  let pausedBefore: string[] = [];
  runToEnd(engine, 0, 5000, (step) => {
    if (step === 3 || step === 13 || step === 23) engine.submit(request(`b${step}`, 'b', 4, 2), 0);
    const paused = engine.pausedRequests();
    pauses.push(...paused.filter((id) => !pausedBefore.includes(id)));
    pausedBefore = paused;
  });
  assert.deepEqual(pauses, ['a2', 'a1', 'a0']);
});

test('one tenant never pauses its own sequences: it waits for its own to end', () => {
  const engine = new Engine(config({ runningMax: 2 }), forwardFor(model, 64, 16));
  for (let i = 0; i < 5; i++) engine.submit(request(`a${i}`, 'a', 6, 10), 0);
  runToEnd(engine, 0, 5000, () => assert.deepEqual(engine.pausedRequests(), []));
});

test('limits: 503 when the queue is full or the wait too long, 400 over the context, 503 past the quota', () => {
  const forward = forwardFor(model, 16, 16);
  const engine = new Engine(config({ waitingMax: 2, queueTimeoutMs: 50 }), forward);
  const code = (fn: () => void) => {
    try {
      fn();
    } catch (e) {
      if (e instanceof KvfenceError) return e.code;
      throw e;
    }
    return 'accepted';
  };
  assert.equal(
    code(() => engine.submit(request('over', 'a', 200, 57), 0)),
    'context_length_exceeded',
  );
  assert.equal(
    code(() => engine.submit(request('a1', 'a', 100, 150), 0)),
    'accepted',
  );
  assert.equal(
    code(() => engine.submit(request('a2', 'a', 100, 150), 0)),
    'accepted',
  );
  assert.equal(
    code(() => engine.submit(request('q', 'q', 100, 150, 15), 0)),
    'kv_capacity_exceeded',
  ); // 16 pages can never fit a quota of 15: refused now, not after the queue timeout
  assert.equal(
    code(() => engine.submit(request('b1', 'b', 4, 4), 0)),
    'server_overloaded',
  ); // a1 and a2 wait
  engine.step(0); // a1 runs; a2 waits behind the pool
  const events = engine.step(60);
  const end = events.find((e) => e.kind === 'end' && e.request === 'a2');
  assert.ok(
    end !== undefined && end.kind === 'end' && end.end.kind === 'failed' && end.end.error.code === 'server_overloaded',
  );
  assert.ok(engine.cancel('a1'));
  assert.equal(forward.pool.checkConservation().free, 16);
  assert.equal(engine.hasWork, false);
});

test('cancel frees a running request’s pages at once, mid-prefill or mid-decode', () => {
  const forward = forwardFor(model, 64, 16);
  const engine = new Engine(config(), forward);
  engine.submit(request('x', 'a', 60, 30), 0);
  engine.submit(request('y', 'a', 5, 30), 0);
  engine.step(0);
  engine.step(0);
  assert.equal(forward.pool.pagesOfTenant('a'), 6 + 3);
  assert.ok(engine.cancel('x'));
  assert.equal(forward.pool.pagesOfTenant('a'), 3);
  assert.equal(engine.cancel('x'), false);
  runToEnd(engine);
  assert.equal(forward.pool.checkConservation().free, 64);
});

// the thief's table pointed at the victim's first page: one of the thief's pages it reads, or the one it is about to
// write and not read (its written count at a page boundary), which only the write check guards
const VIOLATIONS = [
  { through: 'a page it reads', thiefPrompt: 20, corrupt: (_written: number, step: number) => (step === 6 ? 0 : -1) },
  {
    through: 'the page it is about to write (at a page boundary)',
    thiefPrompt: 32,
    corrupt: (written: number) => (written >= 32 && written % 16 === 0 ? written / 16 : -1),
  },
];

for (const v of VIOLATIONS) {
  test(`an ownership violation through ${v.through} aborts only the offending request and reports an incident`, () => {
    const forward = forwardFor(model, 64, 16);
    const engine = new Engine(config(), forward);
    const victim = request('victim', 'b', 20, 12);
    engine.submit(request('thief', 'a', v.thiefPrompt, 12), 0);
    engine.submit(victim, 0);
    let corrupted = false;
    const outcomes = runToEnd(engine, 0, 5000, (step) => {
      const thief = engine.runningTable('thief');
      const page = thief === undefined || corrupted ? -1 : v.corrupt(thief.writtenTokens, step);
      if (page < 0) return;
      thief!.pages[page] = engine.runningTable('victim')!.pages[0]!;
      corrupted = true;
    });
    assert.ok(corrupted, 'the thief’s table was pointed at the victim’s page');
    const incident = outcomes.get('incident:thief')!.end;
    assert.ok(incident?.kind === 'incident');
    assert.equal(incident.incident.tenant, 'a');
    assert.equal(incident.incident.violation.pageOwner?.tenant, 'b');
    const thiefEnd = outcomes.get('thief')!.end;
    assert.ok(
      thiefEnd?.kind === 'end' &&
        thiefEnd.end.kind === 'failed' &&
        thiefEnd.end.error.code === 'kv_isolation_violation',
    );
    assert.ok(!thiefEnd.end.error.message.includes('victim'), 'the failure does not name the other request');
    const solo = generate(forwardFor(model, 64, 16), victim.promptTokens, {
      maxTokens: 12,
      sampling: GREEDY,
      prefillChunkTokens: 64,
      isStopToken: () => false,
    });
    assert.deepEqual(outcomes.get('victim')!.tokens, solo.tokens, 'the victim ran on, undisturbed');
    assert.deepEqual(outcomes.get('victim')!.logprobs, solo.logprobs);
    assert.equal(
      forward.pool.checkConservation().free,
      64,
      'the thief’s own pages were released through its reservation',
    );
  });
}

test('a request that did not ask for logprobs gets the same tokens, with logprob 0 and no alternatives', () => {
  const run = (logprobs: boolean | undefined) => {
    const engine = new Engine(config(), forwardFor(model, 64, 16));
    engine.submit({ ...request('r', 't', 20, 6), ...(logprobs !== undefined ? { logprobs } : {}) }, 0);
    const tokens: GeneratedToken[] = [];
    for (let step = 0; engine.hasWork; step++) {
      assert.ok(step < 100, 'finished within the step bound');
      for (const e of engine.step(0)) if (e.kind === 'token') tokens.push(e.token);
    }
    return tokens;
  };
  const asked = run(undefined);
  const not = run(false);
  assert.equal(asked.length, 6);
  assert.deepEqual(
    not.map((t) => t.id),
    asked.map((t) => t.id),
  );
  assert.ok(asked.every((t) => t.top.length === 2 && t.logprob < 0));
  assert.ok(not.every((t) => t.top.length === 0 && t.logprob === 0));
});

test('a response format too ambiguous to follow fails its own request; the step and other tenants run on', () => {
  // an array of 65 strings that differ only in minLength: more parses at once than a mask follows (64). Thrown from
  // the sampler, it stopped the step: the engine thread failed, and every tenant's requests with it, for good
  const engine = new Engine(config({ grammars: grammarCacheFor(model.tokenizer) }), forwardFor(model, 64, 16));
  const strings = { anyOf: Array.from({ length: 65 }, (_, i) => ({ type: 'string', minLength: i })) };
  engine.submit(
    {
      ...request('ambiguous', 'a', 5, 8),
      constraint: { kind: 'json_schema', schema: { type: 'array', items: strings } },
    },
    0,
  );
  engine.submit(request('other', 'b', 5, 8), 0);
  const out = runToEnd(engine);
  const end = out.get('ambiguous')?.end;
  assert.ok(end?.kind === 'end' && end.end.kind === 'failed', JSON.stringify(end));
  assert.equal(end.end.kind === 'failed' ? end.end.error.code : '', 'invalid_request_error');
  assert.match(end.end.kind === 'failed' ? end.end.error.message : '', /too ambiguous/);
  assert.equal(out.get('other')?.tokens.length, 8);
  assert.equal(engine.hasWork, false);
});
