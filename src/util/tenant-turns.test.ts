import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TenantTurns } from './tenant-turns.js';

const takeAll = (turns: TenantTurns<string>) => {
  const taken: string[] = [];
  for (let next = turns.take(); next !== undefined; next = turns.take()) taken.push(next.item);
  return taken;
};

test('tenants take turns, each in its own order; a tenant new since its items ran out goes first', () => {
  const turns = new TenantTurns<string>();
  for (const item of ['a1', 'a2', 'a3']) turns.push('a', item);
  assert.equal(turns.take()?.item, 'a1');
  turns.push('b', 'b1');
  turns.push('b', 'b2');
  assert.deepEqual([turns.size, turns.sizeOf('a'), turns.sizeOf('b')], [4, 2, 2]);
  assert.deepEqual(takeAll(turns), ['b1', 'a2', 'b2', 'a3']);
  // a tenant sending one item at a time keeps its last turn: it does not rank as new, ahead of a backlog
  for (const item of ['c1', 'c2', 'c3']) turns.push('c', item);
  turns.push('a', 'a4');
  assert.deepEqual([turns.take()?.item, turns.take()?.item], ['c1', 'a4']);
  turns.push('a', 'a5');
  assert.deepEqual(takeAll(turns), ['c2', 'a5', 'c3']);
});

test('an item removed is not taken; drain empties every queue', () => {
  const turns = new TenantTurns<string>();
  turns.push('a', 'a1');
  turns.push('a', 'a2');
  turns.push('b', 'b1');
  assert.equal(turns.remove('a', 'a1'), true);
  assert.equal(turns.remove('a', 'a1'), false);
  assert.equal(turns.remove('b', 'a2'), false);
  assert.deepEqual(takeAll(turns), ['a2', 'b1']);
  turns.push('a', 'a3');
  turns.push('b', 'b2');
  assert.deepEqual(turns.drain().sort(), ['a3', 'b2']);
  assert.deepEqual([turns.size, turns.take()], [0, undefined]);
});

test('take skips the tenants it is told are not eligible, and leaves their turn as it was', () => {
  const turns = new TenantTurns<string>();
  turns.push('a', 'a1');
  turns.push('a', 'a2');
  turns.push('b', 'b1');
  assert.equal(turns.take((tenant) => tenant !== 'a')?.item, 'b1');
  assert.equal(
    turns.take((tenant) => tenant !== 'a'),
    undefined,
    'only a has items',
  );
  assert.equal(turns.sizeOf('a'), 2);
  turns.push('b', 'b2');
  // a has had no turn yet, b has: a goes first once eligible
  assert.deepEqual(takeAll(turns), ['a1', 'b2', 'a2']);
});
