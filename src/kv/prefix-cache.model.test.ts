/**
 * Model-based test of the prefix cache over the real pool (fast-check): random requests of three tenants with prompts
 * over a two-token alphabet (so prefixes collide often) start — attach what is cached, make room, reserve the rest,
 * "compute" the remaining prompt pages, publish — and end, while admission-style `makeRoom` calls evict at random.
 * A page's KV here is a value derived from the tokens from position 0 to the page's end, as a model's is. After every
 * step:
 *   - every live request passes I3 over its whole prompt, and every page it reads holds the KV of *its own* prompt's
 *     prefix (the content check that a stale or mismatched entry fails);
 *   - every shared page it reads belongs to its own tenant's cache (I9);
 *   - conservation: active pages == cached pages + the live requests' own pages; no tenant's cache over its budget.
 * When all requests end, only cached pages are held, and evicting them all leaves the pool whole and zero.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MutantPagePool, type PoolFaults, StaleIndexPrefixCache } from '../../test/mutants/seeded-faults.js';
import { makeKvLayout } from './kv-layout.js';
import type { PagePool, PageReservation } from './page-pool.js';
import { newPageTable, type PageTable } from './page-table.js';
import { type CachedPage, PrefixCache } from './prefix-cache.js';

/** the faults of mutant (c), in the pool and in the cache */
type SeededFaults = PoolFaults & { staleIndex?: boolean };

const PAGE = 2;
const PAGE_COUNT = 24;
const BUDGET = 3;
const layout = makeKvLayout(1, 1, PAGE);
const TENANTS = ['acme', 'globex', 'initech'];

type Command =
  | { kind: 'start'; tenant: number; prompt: number[]; extra: number }
  | { kind: 'end'; pick: number }
  | { kind: 'room'; pages: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    arbitrary: fc.record({
      kind: fc.constant('start' as const),
      tenant: fc.nat(2),
      prompt: fc.array(fc.nat(1), { minLength: 1, maxLength: 9 }),
      extra: fc.nat(3),
    }),
    weight: 5,
  },
  { arbitrary: fc.record({ kind: fc.constant('end' as const), pick: fc.nat(1000) }), weight: 3 },
  { arbitrary: fc.record({ kind: fc.constant('room' as const), pages: fc.nat(PAGE_COUNT / 2) }), weight: 1 },
);

/** The KV of a page: a value of every token up to its end (never 0, so a scrubbed page never passes). */
function kvOf(prompt: readonly number[], end: number): number {
  return prompt.slice(0, end).reduce((h, t) => (h * 3 + t + 1) % 65_521, 1) + 1; // a nonzero f16 bit pattern
}

interface Live {
  prompt: number[];
  table: PageTable;
  reservation: PageReservation;
  hits: CachedPage[];
}

class Harness {
  readonly pool: PagePool;
  readonly cache: PrefixCache;
  readonly live: Live[] = [];
  private requests = 0;

  constructor(mutants: SeededFaults) {
    this.pool = new MutantPagePool(layout, PAGE_COUNT, mutants);
    this.cache = new (mutants.staleIndex === true ? StaleIndexPrefixCache : PrefixCache)(this.pool, BUDGET);
  }

  run(c: Command): void {
    if (c.kind === 'room') this.cache.makeRoom(c.pages);
    else if (c.kind === 'end') {
      if (this.live.length === 0) return;
      const [gone] = this.live.splice(c.pick % this.live.length, 1);
      this.end(gone!);
    } else this.start(TENANTS[c.tenant]!, c.prompt, c.extra);
  }

  private start(tenant: string, prompt: number[], extra: number): void {
    const table = newPageTable({ tenant, request: `r${this.requests++}` });
    const keys = this.cache.keysOf(tenant, prompt);
    const hits = this.cache.attach(table, keys, Math.floor((prompt.length - 1) / PAGE));
    const own = Math.ceil((prompt.length + extra) / PAGE) - hits.length;
    if (!this.cache.makeRoom(own)) {
      this.cache.detach(hits); // does not fit now: a request that would wait
      return;
    }
    const reservation = this.pool.reserve(table.owner, own)!;
    this.pool.acquire(reservation, table);
    this.pool.checkReadable(table, table.writtenTokens); // what the forward pass checks before it runs
    for (let i = table.sharedPages; i * PAGE < prompt.length; i++) {
      const page = table.pages[i]!;
      this.pool.arena.fill(
        kvOf(prompt, (i + 1) * PAGE),
        page * layout.valuesPerPage,
        (page + 1) * layout.valuesPerPage,
      );
    }
    this.pool.markWritten(table, prompt.length);
    this.cache.publish(table, keys);
    this.live.push({ prompt, table, reservation, hits });
  }

  private end(r: Live): void {
    this.pool.release(r.reservation);
    this.cache.detach(r.hits);
  }

  check(): void {
    let own = 0;
    for (const r of this.live) {
      this.pool.checkReadable(r.table, r.prompt.length);
      for (let i = 0; i * PAGE < r.prompt.length; i++) {
        const page = r.table.pages[i]!;
        assert.equal(
          this.pool.arena[page * layout.valuesPerPage],
          kvOf(r.prompt, (i + 1) * PAGE),
          `${r.table.owner.request} reads its own prompt's KV at page ${i}`,
        );
        if (i < r.table.sharedPages) {
          const owner = this.pool.ownerOf(page);
          assert.ok(owner?.shared === true && owner.tenant === r.table.owner.tenant, 'a shared page of its tenant');
        }
      }
      own += r.table.pages.length - r.table.sharedPages;
    }
    const { active, reserved } = this.pool.checkConservation();
    assert.equal(reserved, 0);
    assert.equal(active, own + this.cache.pageCount, 'held pages: the live requests’ own and the cached');
    for (const tenant of TENANTS) assert.ok(this.cache.pagesOf(tenant) <= BUDGET, `${tenant} within its budget`);
  }

  drain(): void {
    for (const r of this.live.splice(0)) this.end(r);
    this.check();
    assert.equal(this.pool.freePageCount + this.cache.pageCount, PAGE_COUNT);
    assert.ok(this.cache.makeRoom(PAGE_COUNT));
    assert.equal(this.cache.pageCount, 0);
    assert.ok(this.pool.arena.every((v) => v === 0));
  }
}

function runCommands(commands: readonly Command[], mutants: SeededFaults = {}): Harness {
  const h = new Harness(mutants);
  for (const c of commands) {
    h.run(c);
    h.check();
  }
  h.drain();
  return h;
}

const commands = fc.array(command, { minLength: 1, maxLength: 120, size: 'max' });

test('the prefix cache gives every request its own prompt’s KV, within its tenant and budget, under random traffic', () => {
  let reused = 0;
  let evicted = 0;
  fc.assert(
    fc.property(commands, (sequence) => {
      const h = runCommands(sequence);
      reused += h.cache.reusedPages;
      evicted += h.cache.evictedPages;
    }),
    { numRuns: 300, seed: 20261202 },
  );
  assert.ok(reused > 500 && evicted > 500, `exercised: ${reused} pages reused, ${evicted} evicted`);
});

test('the model test has teeth: a stale entry is caught by the epoch check, and leaks wrong KV without it', () => {
  const failure = (mutants: SeededFaults) =>
    fc.check(
      fc.property(commands, (sequence) => {
        runCommands(sequence, mutants);
      }),
      { numRuns: 300, seed: 20261202 },
    );
  const caught = failure({ staleIndex: true });
  assert.ok(caught.failed && /stale epoch/.test(String(caught.errorInstance)), String(caught.errorInstance));
  const leaked = failure({ staleIndex: true, epochUnchecked: true });
  assert.ok(
    leaked.failed && /reads its own prompt's KV/.test(String(leaked.errorInstance)),
    String(leaked.errorInstance),
  );
});
