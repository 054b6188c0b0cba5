import assert from 'node:assert/strict';
import { test } from 'node:test';
import { costlyConstraint, whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { KvfenceError } from '../util/errors.js';
import { Grammar } from './grammar.js';
import { constraintGrammar, type OutputConstraint } from './grammar-cache.js';
import { GrammarThread } from './grammar-thread.js';

const object = (n: number, tag = 'p'): OutputConstraint => ({
  kind: 'json_schema',
  schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`${tag}${i}`, {}])) },
});

/** Queues a build and resolves with its outcome, noting when it came. */
function build(thread: GrammarThread, key: string, tenant: string, constraint: OutputConstraint, order: string[]) {
  return new Promise<Grammar | KvfenceError>((resolve) =>
    thread.build(key, tenant, constraint, 30_000, (result) => {
      order.push(key);
      resolve(result);
    }),
  );
}

test('grammars are built on the thread, the loop running: the same tables as inline; a bad schema is its 400', async () => {
  const thread = new GrammarThread(() => {});
  try {
    const { constraint: costly, inlineMs } = costlyConstraint('k');
    const { value, longestGapMs } = await whileTicking(() => build(thread, 'k', 'a', costly, []));
    assert.ok(value instanceof Grammar);
    assert.ok(
      longestGapMs < inlineMs / 2,
      `the loop stalled ${longestGapMs.toFixed(0)} ms (a build: ${inlineMs.toFixed(0)} ms)`,
    );
    const inline = constraintGrammar(costly);
    assert.deepEqual(value.rangeTarget, inline.rangeTarget);
    assert.deepEqual(value.callRule, inline.callRule);
    assert.equal(value.stateCount, inline.stateCount);
    const bad = await build(
      thread,
      'bad',
      'a',
      { kind: 'json_schema', schema: { type: 'string', format: 'email' } },
      [],
    );
    assert.ok(bad instanceof KvfenceError && bad.code === 'invalid_request_error', String(bad));
  } finally {
    await thread.close();
  }
});

test('tenants take turns; the same grammar asked twice is built once; a withdrawn build never runs', async () => {
  const thread = new GrammarThread(() => {});
  try {
    const order: string[] = [];
    // a's first runs at once; a's backlog waits behind b's first, which waits for one build at most
    const all = [
      build(thread, 'a1', 'a', object(30, 'a1_'), order),
      build(thread, 'a2', 'a', object(30, 'a2_'), order),
      build(thread, 'a3', 'a', object(30, 'a3_'), order),
      build(thread, 'b1', 'b', object(30, 'b1_'), order),
      build(thread, 'a2', 'a', object(30, 'a2_'), order), // shares a2's build
    ];
    let withdrawnDone = false;
    const withdraw = thread.build('a4', 'a', object(30, 'a4_'), 30_000, () => {
      withdrawnDone = true;
    });
    withdraw();
    await Promise.all(all);
    assert.deepEqual(order, ['a1', 'b1', 'a2', 'a2', 'a3']);
    assert.equal(thread.built, 4, 'a2 once, a4 never');
    assert.equal(withdrawnDone, false);
  } finally {
    await thread.close();
  }
});

test('bounds: a tenant’s queued builds (429), a waiter’s time (503); the thread is started again after a close', async () => {
  const thread = new GrammarThread(() => {});
  try {
    const pending = [build(thread, 'running', 'a', object(60), [])];
    for (let i = 0; i < 8; i++) pending.push(build(thread, `q${i}`, 'a', object(5, `q${i}_`), []));
    assert.throws(
      () => thread.build('q8', 'a', object(5, 'q8_'), 30_000, () => {}),
      (e: unknown) => e instanceof KvfenceError && e.code === 'rate_limit_exceeded',
    );
    // another tenant is not refused for a's backlog; one that cannot wait hears a 503 in its time
    const late = new Promise<Grammar | KvfenceError>((resolve) => thread.build('b', 'b', object(5, 'b_'), 1, resolve));
    const result = await late;
    assert.ok(result instanceof KvfenceError && result.code === 'server_overloaded', String(result));
    await Promise.all(pending);
    await thread.close();
    assert.ok((await build(thread, 'again', 'a', object(3), [])) instanceof Grammar);
  } finally {
    await thread.close();
  }
});

test('a close fails the running and the queued builds; none runs after it', async () => {
  const built: string[] = [];
  const thread = new GrammarThread((key) => built.push(key));
  const running = build(thread, 'running', 'a', costlyConstraint('r').constraint, []);
  const queued = build(thread, 'queued', 'b', object(5, 'q_'), []);
  await new Promise((resolve) => setTimeout(resolve, 5));
  await thread.close();
  for (const result of await Promise.all([running, queued])) assert.ok(result instanceof KvfenceError, String(result));
  await new Promise((resolve) => setTimeout(resolve, 500));
  assert.deepEqual(built, [], 'nothing was built after the close');
  await thread.close();
});

test('a tenant sending one schema at a time takes its turn, not every turn: a backlog is not starved', async () => {
  const thread = new GrammarThread(() => {});
  try {
    const order: string[] = [];
    const backlog = [1, 2, 3].map((i) => build(thread, `a${i}`, 'a', object(20, `a${i}_`), order));
    // b and c each send their next schema when their last is built, while another build runs
    const chain = async (tenant: string) => {
      for (let i = 1; i <= 6; i++) await build(thread, `${tenant}${i}`, tenant, object(20, `${tenant}${i}_`), order);
    };
    await Promise.all([...backlog, chain('b'), chain('c')]);
    assert.ok(order.indexOf('a3') < 8, `a's backlog ran within a few turns: ${order.join(' ')}`);
  } finally {
    await thread.close();
  }
});

test('one tenant’s requests for one schema are bounded (429), so they cannot fill the thread’s queue for others', async () => {
  const thread = new GrammarThread(() => {});
  try {
    const pending: Promise<unknown>[] = [];
    const constraint = object(60, 'same_');
    for (let i = 0; i < 64; i++) pending.push(build(thread, 'same', 'a', constraint, []));
    assert.throws(
      () => thread.build('same', 'a', constraint, 30_000, () => {}),
      (e: unknown) => e instanceof KvfenceError && e.code === 'rate_limit_exceeded',
    );
    pending.push(build(thread, 'b', 'b', object(3, 'b_'), [])); // another tenant still gets in
    await Promise.all(pending);
    assert.equal(thread.built, 2);
  } finally {
    await thread.close();
  }
});

test('a build whose requests all left still reaches the cache', async () => {
  const cached: string[] = [];
  const thread = new GrammarThread((key) => cached.push(key));
  try {
    const withdraw = thread.build('left', 'a', object(30, 'left_'), 30_000, () => assert.fail('withdrawn'));
    await new Promise((resolve) => setTimeout(resolve, 20)); // running by now
    withdraw();
    await build(thread, 'after', 'a', object(3, 'after_'), []);
    assert.deepEqual(cached, ['left', 'after']);
  } finally {
    await thread.close();
  }
});
