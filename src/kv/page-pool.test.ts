import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { makeKvLayout } from './kv-layout.js';
import { PagePool } from './page-pool.js';
import { newPageTable } from './page-table.js';

const layout = makeKvLayout(2, 4, 4);

function isViolation(pattern: RegExp) {
  return (e: unknown) => e instanceof KvfenceError && e.code === 'kv_isolation_violation' && pattern.test(e.message);
}

test('grants are all or nothing and free + used stays equal to the total', () => {
  const pool = new PagePool(layout, 4);
  const a = newPageTable({ tenant: 'x', request: 'a' });
  assert.ok(pool.grow(a, 3));
  assert.equal(pool.grow(newPageTable({ tenant: 'y', request: 'b' }), 2), false);
  assert.equal(pool.freePageCount, 1);
  assert.equal(pool.usedPageCount, 3);
  pool.releaseAll(a);
  assert.equal(pool.freePageCount, 4);
});

test('release zeroes the page and bumps its epoch, so an old table can no longer read it', () => {
  const pool = new PagePool(layout, 1);
  const a = newPageTable({ tenant: 'x', request: 'a' });
  pool.grow(a, 1);
  pool.markWritten(a, 3);
  pool.arena.fill(7);
  const stale = { ...a, pages: [...a.pages], epochs: [...a.epochs] };
  pool.releaseAll(a);
  assert.ok(pool.arena.every((v) => v === 0));
  const b = newPageTable({ tenant: 'x', request: 'a' }); // same names, new grant
  pool.grow(b, 1);
  pool.markWritten(b, 3);
  assert.throws(() => pool.checkReadable(stale, 3), isViolation(/stale epoch|someone else/));
  pool.checkReadable(b, 3);
});

test('reading past the written count or through another owner fails the check', () => {
  const pool = new PagePool(layout, 2);
  const a = newPageTable({ tenant: 'x', request: 'a' });
  const b = newPageTable({ tenant: 'y', request: 'b' });
  pool.grow(a, 1);
  pool.grow(b, 1);
  pool.markWritten(a, 2);
  assert.throws(() => pool.checkReadable(a, 3), isViolation(/only 2 were written/));
  assert.throws(() => pool.checkReadable(a, 5), isViolation(/shorter than the tokens read/));
  const forged = { ...b, pages: [a.pages[0]!], epochs: [a.epochs[0]!] };
  assert.throws(() => pool.checkReadable(forged, 1), isViolation(/someone else/));
});

test('reserve → acquire → release: states, per-tenant counts and conservation', () => {
  const pool = new PagePool(layout, 6);
  const r = pool.reserve({ tenant: 'x', request: 'a' }, 4);
  assert.ok(r !== undefined);
  assert.equal(pool.reserve({ tenant: 'y', request: 'b' }, 3), undefined, 'all or nothing');
  assert.equal(pool.stateOf(r.pages[0]!), 'reserved');
  assert.deepEqual(pool.checkConservation(), { free: 2, reserved: 4, active: 0 });
  const table = pool.acquire(r);
  assert.equal(pool.stateOf(table.pages[0]!), 'active');
  assert.equal(pool.pagesOfTenant('x'), 4);
  pool.markWritten(table, 10);
  pool.checkReadable(table, 10);
  pool.release(r);
  pool.release(r); // idempotent
  assert.equal(pool.pagesOfTenant('x'), 0);
  assert.deepEqual(pool.checkConservation(), { free: 6, reserved: 0, active: 0 });
  assert.throws(() => pool.checkReadable(table, 1), isViolation(/someone else|stale/));
  assert.equal(pool.reservationCount, 1);
});

test('a reserved page is not readable until acquired, and a corrupted table cannot make pages leak', () => {
  const pool = new PagePool(layout, 4);
  const owner = { tenant: 'x', request: 'a' };
  const r = pool.reserve(owner, 2)!;
  assert.throws(
    () =>
      pool.checkReadable({ owner, pages: [...r.pages], epochs: [...r.epochs], writtenTokens: 0, sharedPages: 0 }, 1),
    isViolation(/not active|only 0/),
  );
  const table = pool.acquire(r);
  table.pages[0] = 3; // corrupted view: release goes by the pool's own record
  pool.release(r);
  assert.deepEqual(pool.checkConservation(), { free: 4, reserved: 0, active: 0 });
});
