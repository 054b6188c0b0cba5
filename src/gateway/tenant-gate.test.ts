import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type ErrorCode, KvfenceError } from '../util/errors.js';
import { TenantGate, type TenantLease } from './tenant-gate.js';
import type { TenantLimits } from './tenants.js';

/** Long enough never to fire in a passing test; admitted waiters clear it. */
const LONG_MS = 10_000;
const NEVER = new AbortController().signal;

const gateOf = (limits: TenantLimits) => new TenantGate(() => limits);

function hasCode(code: ErrorCode): (error: unknown) => true {
  return (error) => {
    assert.ok(error instanceof KvfenceError, `not a KvfenceError: ${String(error)}`);
    assert.equal(error.code, code);
    return true;
  };
}

/** Lets pending promise callbacks run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Records the order in which waiting entries are admitted. */
function admittedInto(order: string[], name: string, entry: Promise<TenantLease>): Promise<TenantLease> {
  return entry.then((lease) => {
    order.push(name);
    return lease;
  });
}

test('beyond concurrentRequestsMax a request gets 429 at once, waiting ones counted', async () => {
  const gate = gateOf({ concurrentRequestsMax: 2, kvPagesMax: 10 });
  const first = await gate.enter('a', 8, LONG_MS, NEVER);
  const second = gate.enter('a', 8, LONG_MS, NEVER); // waits for a's pages
  assert.equal(gate.waitingCount, 1);
  assert.equal(gate.requestsOf('a'), 2);
  await assert.rejects(gate.enter('a', 1, LONG_MS, NEVER), hasCode('rate_limit_exceeded'));
  assert.equal(gate.requestsOf('a'), 2, 'a refused request holds nothing');
  first.release();
  const lease = await second;
  assert.equal(gate.pagesOf('a'), 8);
  lease.release();
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a'), gate.waitingCount], [0, 0, 0]);
});

test("a request past its tenant's page quota waits and is admitted on release, in the tenant's order", async () => {
  const gate = gateOf({ concurrentRequestsMax: 8, kvPagesMax: 10 });
  const order: string[] = [];
  const r1 = await gate.enter('a', 6, LONG_MS, NEVER);
  const r2 = admittedInto(order, 'r2', gate.enter('a', 6, LONG_MS, NEVER));
  const r3 = admittedInto(order, 'r3', gate.enter('a', 4, LONG_MS, NEVER)); // would fit now, but r2 is ahead
  await settle();
  assert.deepEqual(order, []);
  assert.deepEqual([gate.pagesOf('a'), gate.waitingCount], [6, 2]);
  r1.release();
  const [l2, l3] = await Promise.all([r2, r3]);
  assert.deepEqual(order, ['r2', 'r3']);
  assert.deepEqual([gate.pagesOf('a'), gate.requestsOf('a'), gate.waitingCount], [10, 2, 0]);
  l2.release();
  l3.release();
  assert.deepEqual([gate.pagesOf('a'), gate.requestsOf('a')], [0, 0]);
});

test('another tenant is never delayed by a waiting tenant', async () => {
  const gate = gateOf({ concurrentRequestsMax: 8, kvPagesMax: 10 });
  const a1 = await gate.enter('a', 10, LONG_MS, NEVER);
  const a2 = gate.enter('a', 5, LONG_MS, NEVER);
  const b1 = await gate.enter('b', 10, LONG_MS, NEVER);
  assert.deepEqual([b1.tenant, b1.pages, gate.pagesOf('b'), gate.waitingCount], ['b', 10, 10, 1]);
  b1.release();
  a1.release();
  (await a2).release();
  assert.deepEqual([gate.requestsOf('a'), gate.requestsOf('b'), gate.waitingCount], [0, 0, 0]);
});

test('a waiter times out with server_overloaded, holds nothing, and no longer blocks those behind it', async () => {
  const gate = gateOf({ concurrentRequestsMax: 8, kvPagesMax: 10 });
  const holder = await gate.enter('a', 6, LONG_MS, NEVER);
  const started = Date.now();
  const late = gate.enter('a', 6, 20, NEVER);
  const behind = gate.enter('a', 4, LONG_MS, NEVER); // fits once `late` is gone
  await assert.rejects(late, hasCode('server_overloaded'));
  assert.ok(Date.now() - started >= 15, 'not before its timeout');
  const lease = await behind;
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a'), gate.waitingCount], [2, 10, 0]);
  holder.release();
  lease.release();
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a'), gate.waitingCount], [0, 0, 0]);
});

test('an aborted signal rejects a waiter with request_cancelled and frees its place', async () => {
  const gate = gateOf({ concurrentRequestsMax: 2, kvPagesMax: 10 });
  const holder = await gate.enter('a', 10, LONG_MS, NEVER);
  const client = new AbortController();
  const waiting = gate.enter('a', 1, LONG_MS, client.signal);
  assert.equal(gate.requestsOf('a'), 2);
  client.abort();
  await assert.rejects(waiting, hasCode('request_cancelled'));
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a'), gate.waitingCount], [1, 10, 0]);
  // its place is free again; a signal aborted before entering is refused as well
  await assert.rejects(gate.enter('a', 1, LONG_MS, AbortSignal.abort()), hasCode('request_cancelled'));
  assert.deepEqual([gate.requestsOf('a'), gate.waitingCount], [1, 0]);
  holder.release();
  assert.equal(gate.requestsOf('a'), 0);
  // with room to spare, a client already gone gets nothing either
  await assert.rejects(gate.enter('a', 1, LONG_MS, AbortSignal.abort()), hasCode('request_cancelled'));
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a')], [0, 0]);
});

test('release is idempotent', async () => {
  const gate = gateOf({ concurrentRequestsMax: 8, kvPagesMax: 10 });
  const l1 = await gate.enter('a', 3, LONG_MS, NEVER);
  const l2 = await gate.enter('a', 4, LONG_MS, NEVER);
  l1.release();
  l1.release();
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a')], [1, 4]);
  l2.release();
  l2.release();
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a')], [0, 0]);
});

test('limits are read per entry: a changed limit applies to new requests', async () => {
  let limits: TenantLimits = { concurrentRequestsMax: 1, kvPagesMax: 4 };
  const seen: string[] = [];
  const gate = new TenantGate((tenant) => {
    seen.push(tenant);
    return limits;
  });
  const l1 = await gate.enter('a', 4, LONG_MS, NEVER);
  await assert.rejects(gate.enter('a', 1, LONG_MS, NEVER), hasCode('rate_limit_exceeded'));
  limits = { concurrentRequestsMax: 2, kvPagesMax: 8 };
  const l2 = await gate.enter('a', 4, LONG_MS, NEVER); // both limits raised: admitted at once
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a')], [2, 8]);
  assert.deepEqual(seen, ['a', 'a', 'a']);
  l1.release();
  l2.release();
  assert.deepEqual([gate.requestsOf('a'), gate.pagesOf('a')], [0, 0]);
});
