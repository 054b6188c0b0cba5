/**
 * The KV page pool: one arena allocated at startup, and per page an owner tag (tenant, request), an epoch, a
 * written-token count and a state. It deals in page ids only and knows nothing of models.
 *
 * Life of a page (reserve → acquire → release):
 *
 *   free ──reserve──▶ reserved ──acquire──▶ active ──release──▶ (scrub: zero values, written = 0, epoch + 1) ──▶ free
 *     ▲                   └──────────────────release──────────────────┘
 *
 * Isolation (DESIGN I3, I4): a page is granted to exactly one owner; releasing it zeroes its values and bumps its epoch
 * before it can be granted again; `checkReadable` is the only way a reader is cleared to attend over a page table.
 * The pool keeps its own record of every grant (the `PageReservation`), so a corrupted page table can neither free a
 * page it does not own nor make the owner's pages leak (I8). A tenant's prefix-cache pages (owner `shared`) are read
 * through the leading `sharedPages` of a table of the same tenant, never written through one (I9).
 *
 * Conservation, checked on every grant and release from counts kept apart: the free list's length, the pages each
 * tenant's requests hold and the pages each tenant's cache holds add up to the pool.
 *
 * The checks have no switch: a benchmark or the mutation self-test that wants one off subclasses the pool and
 * overrides the protected check it removes (bench/, test/mutants/).
 */
import { assert } from '../util/assert.js';
import { KvIsolationError } from './isolation-error.js';
import type { KvArena, KvLayout } from './kv-layout.js';
import { type PageOwner, sameOwner } from './page-owner.js';
import { newPageTable, type PageTable } from './page-table.js';

export type PageState = 'free' | 'reserved' | 'active';
const STATE_FREE = 0;
const STATE_RESERVED = 1;
const STATE_ACTIVE = 2;
const STATE_NAMES: readonly PageState[] = ['free', 'reserved', 'active'];

/** The pool's own record of a grant: which pages, at which epochs, for whom. Only the pool changes it. */
export interface PageReservation {
  readonly owner: PageOwner;
  readonly pages: readonly number[];
  readonly epochs: readonly number[];
  readonly state: 'reserved' | 'acquired' | 'released';
}

interface MutableReservation {
  owner: PageOwner;
  pages: number[];
  epochs: number[];
  state: 'reserved' | 'acquired' | 'released';
}

export class PagePool {
  readonly arena: KvArena; // (pageCount, layout.valuesPerPage)
  private readonly free: Int32Array; // stack of free page ids
  private freeCount: number;
  private readonly owners: (PageOwner | undefined)[];
  private readonly epochs: Uint32Array;
  private readonly written: Int32Array; // tokens written per page
  private readonly states: Uint8Array;
  /** pages held per tenant: by its requests, and by its prefix cache (owner `shared`) */
  private readonly requestPages = new Map<string, number>();
  private readonly cachedPages = new Map<string, number>();
  private reservations = 0;

  constructor(
    readonly layout: KvLayout,
    readonly pageCount: number,
  ) {
    assert(Number.isInteger(pageCount) && pageCount >= 1, `page count ${pageCount} must be a positive integer`);
    this.arena = new Uint16Array(pageCount * layout.valuesPerPage);
    this.free = new Int32Array(pageCount);
    for (let i = 0; i < pageCount; i++) this.free[i] = pageCount - 1 - i; // pop order: 0, 1, 2, ...
    this.freeCount = pageCount;
    this.owners = new Array<PageOwner | undefined>(pageCount).fill(undefined);
    this.epochs = new Uint32Array(pageCount);
    this.written = new Int32Array(pageCount);
    this.states = new Uint8Array(pageCount);
  }

  get freePageCount(): number {
    return this.freeCount;
  }

  get usedPageCount(): number {
    return this.pageCount - this.freeCount;
  }

  /** Successful reservations since startup: a test's proof that a rejected request touched no page. */
  get reservationCount(): number {
    return this.reservations;
  }

  /** Pages a tenant holds (reserved or active): its requests' and its prefix cache's. */
  pagesOfTenant(tenant: string): number {
    return this.requestPagesOf(tenant) + (this.cachedPages.get(tenant) ?? 0);
  }

  /** Pages a tenant's requests hold (its cache's not counted): what its page quota bounds. */
  requestPagesOf(tenant: string): number {
    return this.requestPages.get(tenant) ?? 0;
  }

  /** Every tenant holding pages now. */
  tenantsHoldingPages(): string[] {
    return [...new Set([...this.requestPages.keys(), ...this.cachedPages.keys()])];
  }

  /** Stamps `count` free pages with the owner (written = 0), all or none; undefined when too few are free. */
  reserve(owner: PageOwner, count: number): PageReservation | undefined {
    assert(Number.isInteger(count) && count >= 0, 'page count must be a non-negative integer');
    if (count > this.freeCount) return undefined;
    const reservation: MutableReservation = { owner, pages: [], epochs: [], state: 'reserved' };
    for (let i = 0; i < count; i++) {
      const page = this.free[--this.freeCount]!;
      assert(this.states[page] === STATE_FREE && this.owners[page] === undefined, `free page ${page} is not free`);
      this.checkUntouchedSinceFree(page);
      this.owners[page] = owner;
      this.states[page] = STATE_RESERVED;
      reservation.pages.push(page);
      reservation.epochs.push(this.epochs[page]!);
    }
    this.countHeld(owner, count);
    this.reservations++;
    this.assertConserved();
    return reservation;
  }

  /**
   * Makes a reservation's pages writable and appends them to the page table through which its sequence reads and
   * writes: a new table, or the owner's table that already holds earlier pages (a decode worker's transferred prompt,
   * then the pages for generated tokens).
   */
  acquire(reservation: PageReservation, table: PageTable = newPageTable(reservation.owner)): PageTable {
    const r = reservation as MutableReservation;
    assert(r.state === 'reserved', `acquire of a reservation in state ${r.state}`);
    assert(table.owner === r.owner, 'a reservation is acquired into a table of its own owner');
    r.pages.forEach((page, i) => {
      this.assertHeld(page, r.owner, r.epochs[i]!);
      assert(this.states[page] === STATE_RESERVED, `page ${page} is not reserved`);
      this.states[page] = STATE_ACTIVE;
      table.pages.push(page);
      table.epochs.push(r.epochs[i]!);
    });
    r.state = 'acquired';
    return table;
  }

  /** Returns every page of the reservation: each is zeroed, its epoch bumped, then it is free again. Idempotent. */
  release(reservation: PageReservation): void {
    const r = reservation as MutableReservation;
    if (r.state === 'released') return;
    for (let i = 0; i < r.pages.length; i++) this.freePage(r.pages[i]!, r.owner, r.epochs[i]!);
    this.countHeld(r.owner, -r.pages.length);
    r.state = 'released';
    this.assertConserved();
  }

  /** Single-owner convenience (generate, tests): reserve + acquire `count` more pages into the table, all or none. */
  grow(table: PageTable, count: number): boolean {
    const reservation = this.reserve(table.owner, count);
    if (reservation === undefined) return false;
    this.acquire(reservation, table);
    return true;
  }

  /** Single-owner convenience: releases every page of a table that `grow` filled. */
  releaseAll(table: PageTable): void {
    table.pages.forEach((page, i) => {
      assert(
        this.owners[page] === table.owner && this.epochs[page] === table.epochs[i],
        `release of page ${page} by a non-owner`,
      );
      this.freePage(page, table.owner, table.epochs[i]!);
    });
    this.countHeld(table.owner, -table.pages.length);
    table.pages.length = 0;
    table.epochs.length = 0;
    table.writtenTokens = 0;
    this.assertConserved();
  }

  /**
   * I3 at the point of reading: every page the table's first `tokenCount` tokens live in must be active, belong to the
   * table's owner at the epoch it was granted, and hold at least the tokens read from it. Throws KvIsolationError.
   */
  checkReadable(table: PageTable, tokenCount: number): void {
    const { pageSize } = this.layout;
    const pagesNeeded = Math.ceil(tokenCount / pageSize);
    if (pagesNeeded > table.pages.length) {
      this.violation(table, table.pages.length, 'the page table is shorter than the tokens read');
    }
    for (let i = 0; i < pagesNeeded; i++) this.checkPage(table, i, Math.min(pageSize, tokenCount - i * pageSize));
  }

  /**
   * Records that the table's tokens up to `tokenCount` are (being) written; the pages must be the owner's, active.
   * Throws KvIsolationError for a write into the table's shared prefix pages.
   */
  markWritten(table: PageTable, tokenCount: number): void {
    const { pageSize } = this.layout;
    assert(tokenCount <= table.pages.length * pageSize, 'writing past the granted pages');
    assert(tokenCount >= table.writtenTokens, 'written counts only grow');
    for (let i = Math.floor(table.writtenTokens / pageSize); i < Math.ceil(tokenCount / pageSize); i++) {
      if (i < table.sharedPages) this.violation(table, i, 'a write to a read-only shared prefix page');
      this.checkWritable(table, i);
      this.written[table.pages[i]!] = Math.min(pageSize, tokenCount - i * pageSize);
    }
    table.writtenTokens = tokenCount;
  }

  /**
   * Copies page `index` of `from`, whose first `tokens` tokens are checked readable, into the next unwritten page of
   * `to`, which is then written up to `tokens`: how a prefix cache takes a copy of a request's whole prompt page, and
   * how a choice of an n > 1 request takes its own copy of the prompt's last, partial page (the rest of a partial page
   * is scrubbed zeros, I4).
   */
  copyPage(from: PageTable, index: number, to: PageTable, tokens: number = this.layout.pageSize): void {
    const { pageSize, valuesPerPage } = this.layout;
    assert(Number.isInteger(tokens) && tokens >= 1 && tokens <= pageSize, 'a page copy takes 1..pageSize tokens');
    this.checkPage(from, index, tokens);
    assert(to.writtenTokens % pageSize === 0, 'a page is copied into a fresh page');
    const target = to.pages[to.writtenTokens / pageSize];
    assert(target !== undefined, 'copying past the granted pages');
    const source = from.pages[index]! * valuesPerPage;
    this.arena.copyWithin(target * valuesPerPage, source, source + valuesPerPage);
    this.markWritten(to, to.writtenTokens + tokens);
  }

  /** Owner of a page, for incident records and tests. */
  ownerOf(page: number): PageOwner | undefined {
    return this.owners[page];
  }

  stateOf(page: number): PageState {
    return STATE_NAMES[this.states[page]!]!;
  }

  /**
   * Every page's state, owner and written tokens, in page order, for the dashboard's page map (page-map.ts). It only
   * reads, so a dashboard looking on cannot change what the pool grants, checks or frees.
   */
  visitPages(visit: (page: number, state: PageState, owner: PageOwner | undefined, written: number) => void): void {
    for (let page = 0; page < this.pageCount; page++)
      visit(page, STATE_NAMES[this.states[page]!]!, this.owners[page], this.written[page]!);
  }

  /** Full conservation check (O(pages)), for tests: free + reserved + active == total, and the free list agrees. */
  checkConservation(): { free: number; reserved: number; active: number } {
    const counts = [0, 0, 0];
    for (let page = 0; page < this.pageCount; page++) counts[this.states[page]!]!++;
    const [free, reserved, active] = counts as [number, number, number];
    assert(free === this.freeCount, `free list holds ${this.freeCount} pages but ${free} pages are free`);
    assert(free + reserved + active === this.pageCount, 'free + used == total');
    const held = sum(this.requestPages) + sum(this.cachedPages);
    assert(held === reserved + active, `tenants hold ${held} pages, the pool counts ${reserved + active}`);
    return { free, reserved, active };
  }

  /**
   * I3 for one page of a table: `tokens` of it are read. Throws KvIsolationError. Protected, like the other checks,
   * only so that a benchmark or mutant subclass can remove one (see the file comment).
   */
  protected checkPage(table: PageTable, i: number, tokens: number): void {
    const page = table.pages[i]!;
    if (!Number.isInteger(page) || page < 0 || page >= this.pageCount) this.violation(table, i, 'page id out of range');
    const owner = this.owners[page];
    // an own page: exactly the table's owner (I3); a shared, read-only page: its tenant's cache (any entry, I9) or
    // the table's owner itself (the prompt head an n > 1 request's choices share)
    const own = owner !== undefined && sameOwner(owner, table.owner);
    const mine = i < table.sharedPages ? own || (owner?.shared === true && owner.tenant === table.owner.tenant) : own;
    if (!mine) this.violation(table, i, 'page owned by someone else');
    if (!this.epochMatches(page, table.epochs[i]!))
      this.violation(table, i, 'stale epoch: the page was freed and reused');
    if (this.states[page] !== STATE_ACTIVE)
      this.violation(table, i, `page is ${STATE_NAMES[this.states[page]!]}, not active`);
    if (this.written[page]! < tokens)
      this.violation(table, i, `reads ${tokens} tokens but only ${this.written[page]} were written`);
  }

  /** I4 on reads: the page is still at the epoch the reader was granted it at. */
  protected epochMatches(page: number, epoch: number): boolean {
    return this.epochs[page] === epoch;
  }

  /**
   * A write goes only into an active page its writer holds at its granted epoch; anything else is an isolation
   * violation of the writer's table (KvIsolationError: that request fails alone, with an incident), as a read is.
   */
  protected checkWritable(table: PageTable, i: number): void {
    const page = table.pages[i]!;
    if (!Number.isInteger(page) || page < 0 || page >= this.pageCount) this.violation(table, i, 'page id out of range');
    if (this.owners[page] !== table.owner) this.violation(table, i, 'a write to a page owned by someone else');
    if (!this.epochMatches(page, table.epochs[i]!))
      this.violation(table, i, 'a write at a stale epoch: the page was freed and reused');
    if (this.states[page] !== STATE_ACTIVE)
      this.violation(table, i, `a write to a page that is ${STATE_NAMES[this.states[page]!]}, not active`);
  }

  /** A free page was written by no one since it was freed (a late write through a stale table would show here). */
  protected checkUntouchedSinceFree(page: number): void {
    assert(this.written[page] === 0, `free page ${page} was not scrubbed`);
  }

  /** I4: a freed page's values are zeroed before anyone else can be granted it. */
  protected scrub(page: number): void {
    this.arena.fill(0, page * this.layout.valuesPerPage, (page + 1) * this.layout.valuesPerPage);
  }

  private freePage(page: number, owner: PageOwner, epoch: number): void {
    this.assertHeld(page, owner, epoch);
    this.scrub(page);
    this.owners[page] = undefined;
    this.written[page] = 0;
    this.states[page] = STATE_FREE;
    this.epochs[page] = (this.epochs[page]! + 1) >>> 0;
    this.free[this.freeCount++] = page;
  }

  private assertHeld(page: number, owner: PageOwner, epoch: number): void {
    assert(
      this.owners[page] === owner && this.epochs[page] === epoch,
      `page ${page} is not held by ${owner.request} at epoch ${epoch}`,
    );
  }

  /** Adds `delta` pages to what the owner's tenant holds (its requests', or its cache's for a shared owner). */
  private countHeld(owner: PageOwner, delta: number): void {
    const counts = owner.shared === true ? this.cachedPages : this.requestPages;
    const held = (counts.get(owner.tenant) ?? 0) + delta;
    assert(held >= 0, `tenant ${owner.tenant} holds a non-negative page count`);
    if (held === 0) counts.delete(owner.tenant);
    else counts.set(owner.tenant, held);
  }

  /**
   * Runtime conservation check on every grant and release: the free list, the requests' pages and the caches' pages
   * are counted apart, so a lost or doubled page shows here (O(tenants holding pages)).
   */
  private assertConserved(): void {
    const held = sum(this.requestPages) + sum(this.cachedPages);
    assert(
      this.freeCount + held === this.pageCount,
      `free list ${this.freeCount} + held ${held} == ${this.pageCount} pages`,
    );
  }

  private violation(table: PageTable, index: number, reason: string): never {
    const raw = table.pages[index];
    const page = raw !== undefined && raw >= 0 && raw < this.pageCount ? raw : -1;
    throw new KvIsolationError({
      reader: table.owner,
      page: raw ?? -1,
      pageOwner: page >= 0 ? this.owners[page] : undefined,
      expectedEpoch: table.epochs[index] ?? -1,
      pageEpoch: page >= 0 ? this.epochs[page]! : -1,
      reason,
    });
  }
}

function sum(counts: ReadonlyMap<string, number>): number {
  let total = 0;
  for (const n of counts.values()) total += n;
  return total;
}
