import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MutantPagePool, type PoolFaults, StaleIndexPrefixCache } from '../../test/mutants/seeded-faults.js';
import { KvIsolationError } from './isolation-error.js';
import { makeKvLayout } from './kv-layout.js';
import type { PagePool } from './page-pool.js';
import { newPageTable, type PageTable } from './page-table.js';
import { PrefixCache } from './prefix-cache.js';

/** the faults of mutant (c), in the pool and in the cache */
type SeededFaults = PoolFaults & { staleIndex?: boolean };

const PAGE = 4;
const layout = makeKvLayout(1, 2, PAGE);

function setup(pagesPerTenant: number, pageCount = 32, mutants: SeededFaults = {}) {
  const pool = new MutantPagePool(layout, pageCount, mutants);
  return { pool, cache: new (mutants.staleIndex === true ? StaleIndexPrefixCache : PrefixCache)(pool, pagesPerTenant) };
}

/** A request whose prompt KV is in its pages: each page filled with a value derived from its tokens. */
function computed(pool: PagePool, tenant: string, request: string, prompt: number[]): PageTable {
  const table = newPageTable({ tenant, request });
  assert.ok(pool.grow(table, Math.ceil(prompt.length / PAGE)));
  table.pages.forEach((page, i) => {
    const value = prompt.slice(0, (i + 1) * PAGE).reduce((a, t) => (a * 31 + t) % 65_521, 7) + 1; // nonzero f16 bits
    pool.arena.fill(value, page * layout.valuesPerPage, (page + 1) * layout.valuesPerPage);
  });
  pool.markWritten(table, prompt.length);
  return table;
}

const pageValues = (pool: PagePool, page: number) =>
  Array.from(pool.arena.subarray(page * layout.valuesPerPage, (page + 1) * layout.valuesPerPage));

const PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];

test('keys: a chain over whole pages, seeded with the tenant', () => {
  const { cache } = setup(4);
  const a = cache.keysOf('a', PROMPT);
  assert.equal(a.length, 2, 'two whole pages of 10 tokens');
  assert.deepEqual(cache.keysOf('a', [...PROMPT.slice(0, 8), 99]), a, 'the same whole pages, the same keys');
  assert.equal(cache.keysOf('a', [1, 2, 3, 4, 5, 6, 7, 0, 9])[0], a[0], 'page 0 equal, page 1 not');
  assert.notEqual(cache.keysOf('a', [1, 2, 3, 4, 5, 6, 7, 0, 9])[1], a[1]);
  assert.notEqual(cache.keysOf('a', [0, 2, 3, 4, 5, 6, 7, 8])[1], a[1], 'a key covers every earlier page');
  const b = cache.keysOf('b', PROMPT);
  assert.ok(
    a.every((k) => !b.includes(k)),
    'no key of one tenant equals another tenant’s',
  );
});

test('a tenant’s later request reads a copy of its computed prompt pages; another tenant never does', () => {
  const { pool, cache } = setup(4);
  const first = computed(pool, 'a', 'r1', PROMPT);
  cache.publish(first, cache.keysOf('a', PROMPT));
  assert.equal(cache.pageCount, 2);
  const expected = first.pages.slice(0, 2).map((p) => pageValues(pool, p));
  pool.releaseAll(first); // the request ends: its own pages are scrubbed, the cached copies stay

  const second = newPageTable({ tenant: 'a', request: 'r2' });
  const hits = cache.attach(second, cache.keysOf('a', PROMPT), 2);
  assert.equal(second.sharedPages, 2);
  assert.equal(second.writtenTokens, 2 * PAGE);
  assert.deepEqual(
    second.pages.map((p) => pageValues(pool, p)),
    expected,
  );
  pool.checkReadable(second, 2 * PAGE);
  const rewound = { ...second, pages: [...second.pages], epochs: [...second.epochs], writtenTokens: PAGE };
  assert.throws(
    () => pool.markWritten(rewound, 2 * PAGE),
    (e: unknown) => e instanceof KvIsolationError && /read-only shared prefix page/.test(e.violation.reason),
  );
  assert.equal(cache.reusedPages, 2);

  const other = newPageTable({ tenant: 'b', request: 'r3' });
  assert.deepEqual(cache.attach(other, cache.keysOf('b', PROMPT), 2), []);
  assert.equal(other.sharedPages, 0);
  cache.detach(hits);
});

test('I3 over shared pages: another tenant, or a claim that a cached page is one’s own, fails the owner check', () => {
  const { pool, cache } = setup(4);
  const first = computed(pool, 'a', 'r1', PROMPT);
  cache.publish(first, cache.keysOf('a', PROMPT));
  const reader = newPageTable({ tenant: 'a', request: 'r2' });
  cache.attach(reader, cache.keysOf('a', PROMPT), 2);
  const forged = (owner: { tenant: string; request: string }, sharedPages: number): PageTable => ({
    owner,
    pages: [...reader.pages],
    epochs: [...reader.epochs],
    writtenTokens: reader.writtenTokens,
    sharedPages,
  });
  for (const table of [forged({ tenant: 'b', request: 'x' }, 2), forged({ tenant: 'a', request: 'r2' }, 0)]) {
    assert.throws(
      () => pool.checkReadable(table, 2 * PAGE),
      (e: unknown) => e instanceof KvIsolationError && /owned by someone else/.test(e.violation.reason),
    );
  }
  // another request's own page listed as shared fails too; the request's own page read as shared (the prompt head
  // an n > 1 request's choices share) is its own
  const othersAsShared = { ...forged({ tenant: 'a', request: 'r2' }, 1), pages: [...first.pages] };
  assert.throws(() => pool.checkReadable(othersAsShared, PAGE), /owned by someone else/);
  const ownAsShared = {
    ...forged({ tenant: 'a', request: 'r1' }, 1),
    pages: [...first.pages],
    epochs: [...first.epochs],
  };
  pool.checkReadable(ownAsShared, PAGE);
});

test('a tenant at its budget evicts its own least recently used page, never another tenant’s or a pinned one', () => {
  const { pool, cache } = setup(2);
  cache.publish(computed(pool, 'a', 'a1', PROMPT), cache.keysOf('a', PROMPT));
  const other = [20, 21, 22, 23, 24];
  cache.publish(computed(pool, 'b', 'b1', other), cache.keysOf('b', other));
  assert.deepEqual([cache.pagesOf('a'), cache.pagesOf('b')], [2, 1]);

  const reader = newPageTable({ tenant: 'a', request: 'a2' });
  const pinned = cache.attach(reader, cache.keysOf('a', PROMPT), 1); // pins a's first page
  const next = [40, 41, 42, 43, 44];
  cache.publish(computed(pool, 'a', 'a3', next), cache.keysOf('a', next));
  assert.deepEqual([cache.pagesOf('a'), cache.pagesOf('b')], [2, 1], 'a evicted one of its own');
  const again = newPageTable({ tenant: 'a', request: 'a4' });
  assert.equal(cache.attach(again, cache.keysOf('a', PROMPT), 2).length, 1, 'the pinned page stayed, page 1 went');
  assert.equal(cache.attach(newPageTable({ tenant: 'b', request: 'b2' }), cache.keysOf('b', other), 1).length, 1);

  // everything of a pinned: a new page of a is not cached (the budget holds)
  cache.attach(newPageTable({ tenant: 'a', request: 'a5' }), cache.keysOf('a', next), 1);
  const third = [60, 61, 62, 63, 64];
  cache.publish(computed(pool, 'a', 'a6', third), cache.keysOf('a', third));
  assert.equal(cache.pagesOf('a'), 2);
  assert.equal(cache.attach(newPageTable({ tenant: 'a', request: 'a7' }), cache.keysOf('a', third), 1).length, 0);
  cache.detach(pinned);
});

test('a chain is evicted from its tail: a prompt longer than the budget keeps a reachable head', () => {
  const { pool, cache } = setup(2);
  const long = [...PROMPT, 11, 12, 13]; // three whole pages
  cache.publish(computed(pool, 'a', 'a1', long), cache.keysOf('a', long));
  const reader = newPageTable({ tenant: 'a', request: 'a2' });
  const hits = cache.attach(reader, cache.keysOf('a', long), 3);
  assert.equal(hits.length, 2, 'pages 0 and 1 stay; page 2 did not evict them');
  cache.detach(hits);
  const other = [20, 21, 22, 23, 24];
  cache.publish(computed(pool, 'a', 'a3', other), cache.keysOf('a', other)); // evicts the chain's tail, page 1
  assert.equal(cache.attach(newPageTable({ tenant: 'a', request: 'a4' }), cache.keysOf('a', long), 3).length, 1);
});

test('extending a cached chain never evicts its own head: the older chain gives way', () => {
  const { pool, cache } = setup(2);
  const head = PROMPT.slice(0, 5); // one whole page: the chain's head
  cache.publish(computed(pool, 'a', 'a1', head), cache.keysOf('a', head));
  const other = [20, 21, 22, 23, 24];
  cache.publish(computed(pool, 'a', 'a2', other), cache.keysOf('a', other)); // more recent than the head
  // a request that attached nothing (admitted before the head was cached) publishes the head again and a second page
  cache.publish(computed(pool, 'a', 'a3', PROMPT), cache.keysOf('a', PROMPT));
  const hits = cache.attach(newPageTable({ tenant: 'a', request: 'a4' }), cache.keysOf('a', PROMPT), 2);
  assert.equal(hits.length, 2, 'both pages of the extended chain are reachable');
  assert.equal(cache.attach(newPageTable({ tenant: 'a', request: 'a5' }), cache.keysOf('a', other), 1).length, 0);
});

test('a publish whose table fails its I3 check takes no page', () => {
  const { pool, cache } = setup(4);
  const table = computed(pool, 'a', 'a1', PROMPT);
  const used = pool.usedPageCount;
  table.epochs[1] = table.epochs[1]! + 1;
  assert.throws(() => cache.publish(table, cache.keysOf('a', PROMPT)), KvIsolationError);
  assert.equal(pool.usedPageCount, used);
  assert.equal(cache.pageCount, 0);
});

test('admission takes unpinned cached pages of any tenant back; pinned ones stay', () => {
  const { pool, cache } = setup(8, 6);
  const a = computed(pool, 'a', 'a1', PROMPT);
  cache.publish(a, cache.keysOf('a', PROMPT));
  pool.releaseAll(a);
  const other = [20, 21, 22, 23, 24];
  const b = computed(pool, 'b', 'b1', other);
  cache.publish(b, cache.keysOf('b', other));
  pool.releaseAll(b);
  assert.equal(pool.freePageCount, 3);
  const pins = cache.attach(newPageTable({ tenant: 'b', request: 'b2' }), cache.keysOf('b', other), 1);
  assert.equal(cache.evictablePages, 2);
  assert.equal(cache.makeRoom(6), false, 'the pinned page is not given up');
  assert.equal(pool.freePageCount, 5);
  assert.equal(cache.pageCount, 1);
  cache.detach(pins);
  assert.equal(cache.makeRoom(6), true);
  assert.equal(pool.checkConservation().free, 6);
});

test('mutant (c)’s pair: a stale index entry is stopped by the epoch check alone, and leaks without it', () => {
  const run = (mutants: SeededFaults) => {
    const { pool, cache } = setup(2, 32, mutants);
    const first = computed(pool, 'a', 'a1', PROMPT);
    cache.publish(first, cache.keysOf('a', PROMPT));
    const cached = first.pages.slice(0, 2).map((p) => pageValues(pool, p));
    const next = [40, 41, 42, 43, 44, 45, 46, 47, 48];
    const later = computed(pool, 'a', 'a2', next);
    cache.publish(later, cache.keysOf('a', next)); // evicts PROMPT's two pages; the same pages now cache `next`
    const reader = newPageTable({ tenant: 'a', request: 'a3' });
    const hits = cache.attach(reader, cache.keysOf('a', PROMPT), 2);
    return { pool, reader, hits, cached, nextPages: later.pages.slice(0, 2).map((p) => pageValues(pool, p)) };
  };
  assert.equal(run({}).hits.length, 0, 'eviction takes the entry out of the index');

  const stale = run({ staleIndex: true });
  assert.equal(stale.hits.length, 2, 'the fault: the index still names the evicted pages');
  assert.throws(
    () => stale.pool.checkReadable(stale.reader, 2 * PAGE),
    (e: unknown) => e instanceof KvIsolationError && /stale epoch/.test(e.violation.reason),
  );

  const leak = run({ staleIndex: true, epochUnchecked: true });
  leak.pool.checkReadable(leak.reader, 2 * PAGE); // no check stops it
  const read = leak.reader.pages.map((p) => pageValues(leak.pool, p));
  assert.notDeepEqual(read, leak.cached, 'the reader does not get the prompt it asked for');
  assert.deepEqual(new Set(read.map((f) => f[0])), new Set(leak.nextPages.map((f) => f[0])), 'it gets another one');
});
