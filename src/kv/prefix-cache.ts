/**
 * A tenant-scoped prefix cache (DESIGN I9). When a request's prompt is in the KV, its whole prompt pages are copied
 * into pages owned by its tenant's cache; a later request of the same tenant whose prompt starts with the same tokens
 * reads those pages (read-only, the leading `sharedPages` of its table) and prefills only the rest.
 *
 * Keys are a hash chain over whole pages, seeded with the tenant:
 *
 *   key(-1) = sha256("kvfence prefix" ‖ tenant)      key(i) = sha256(key(i-1) ‖ token ids of page i)
 *
 * so equal keys mean the same tenant and the same tokens from position 0 to the end of page i. No key of one tenant
 * can equal another's: there is no cross-tenant reuse (I9 allows it only for operator-marked public prefixes, which
 * kvfence does not offer).
 *
 * Each cached page is a one-page pool reservation owned by `sharedOwner(tenant)`; a reader's table carries the epoch
 * the page had when it was cached, so the pool's I3 check tells a live entry from a page that was evicted (freed,
 * scrubbed, epoch bumped) and granted again. Entries are pinned while a request reads them; only unpinned ones go:
 * - a tenant at its budget (`pagesPerTenant`) evicts its own least recently used entry to cache a new page, so one
 *   tenant never evicts another's entries (and cannot learn from timing whether another's prompt was cached);
 * - admission short of free pages evicts least recently used entries of any tenant: an idle cache never makes a
 *   request wait, and the capacity proof (the largest request fits the pool) still holds.
 */
import { createHash } from 'node:crypto';
import { assert } from '../util/assert.js';
import { sharedOwner } from './page-owner.js';
import type { PagePool, PageReservation } from './page-pool.js';
import type { PageTable } from './page-table.js';

/** One cached page. Opaque to callers: what `attach` pins and `detach` unpins. */
export interface CachedPage {
  readonly key: string;
  readonly tenant: string;
  readonly reservation: PageReservation;
  /** the entry's own one-page table (written full) */
  readonly table: PageTable;
  refs: number;
}

export class PrefixCache {
  private readonly index = new Map<string, CachedPage>();
  /** live entries, least recently used first */
  private readonly lru = new Set<CachedPage>();
  private readonly tenantPages = new Map<string, number>();
  private reused = 0;
  private evicted = 0;

  constructor(
    private readonly pool: PagePool,
    /** pages one tenant's cache may hold */
    readonly pagesPerTenant: number,
  ) {
    assert(Number.isInteger(pagesPerTenant) && pagesPerTenant >= 1, 'a prefix cache holds at least one page a tenant');
  }

  /** Pages cached (pinned or not). */
  get pageCount(): number {
    return this.lru.size;
  }

  /** Prompt pages requests read from the cache instead of computing them, since startup. */
  get reusedPages(): number {
    return this.reused;
  }

  /** What pool stats report of the cache. */
  stats(): { pagesCached: number; pagesReused: number } {
    return { pagesCached: this.pageCount, pagesReused: this.reused };
  }

  /** Cached pages given up (budget or admission), since startup. */
  get evictedPages(): number {
    return this.evicted;
  }

  /** Pages the cache would give up for admission now (cached, not pinned). */
  get evictablePages(): number {
    let n = 0;
    for (const entry of this.lru) if (entry.refs === 0) n++;
    return n;
  }

  pagesOf(tenant: string): number {
    return this.tenantPages.get(tenant) ?? 0;
  }

  /** The chain keys of the whole pages of a tenant's prompt. */
  keysOf(tenant: string, prompt: readonly number[]): string[] {
    const { pageSize } = this.pool.layout;
    const keys: string[] = [];
    let key = this.chainSeed(tenant);
    for (let start = 0; start + pageSize <= prompt.length; start += pageSize) {
      const ids = Int32Array.from(prompt.slice(start, start + pageSize));
      key = createHash('sha256').update(key).update(new Uint8Array(ids.buffer)).digest('base64');
      keys.push(key);
    }
    return keys;
  }

  /**
   * Pins the longest cached run of `keys` (at most `maxPages`) and puts its pages at the head of an empty table of the
   * same tenant as shared pages, written. Returns the pinned entries, for `detach` when the request ends.
   */
  attach(table: PageTable, keys: readonly string[], maxPages: number): CachedPage[] {
    assert(table.pages.length === 0 && table.writtenTokens === 0, 'cached pages head an empty table');
    const hits: CachedPage[] = [];
    for (const key of keys.slice(0, maxPages)) {
      const entry = this.index.get(key);
      if (entry === undefined) break;
      assert(this.hitAllowed(entry, table), 'a key names its tenant');
      entry.refs++;
      hits.push(entry);
      table.pages.push(entry.table.pages[0]!);
      table.epochs.push(entry.table.epochs[0]!);
    }
    table.sharedPages = hits.length;
    table.writtenTokens = hits.length * this.pool.layout.pageSize;
    this.reused += hits.length;
    return hits;
  }

  /** Unpins what `attach` pinned; the entries become the most recently used. */
  detach(hits: readonly CachedPage[]): void {
    for (const entry of hits) {
      assert(entry.refs > 0, 'a cached page is unpinned once per pin');
      entry.refs--;
    }
    this.touch(hits);
  }

  /**
   * Caches copies of the table's whole prompt pages (`keys` are the prompt's) that are not cached yet, as far as the
   * tenant's budget (evicting its own unpinned entries) and the pool's free pages allow. The table must hold them.
   * Throws KvIsolationError (holding nothing new) when the table fails its I3 check.
   */
  publish(table: PageTable, keys: readonly string[]): void {
    const { tenant } = table.owner;
    const { pageSize } = this.pool.layout;
    assert(keys.length * pageSize <= table.writtenTokens, 'only written pages are cached');
    this.pool.checkReadable(table, keys.length * pageSize);
    const added: CachedPage[] = [];
    try {
      for (let i = table.sharedPages; i < keys.length; i++) {
        const key = keys[i]!;
        const present = this.index.get(key);
        if (present !== undefined) {
          // pinned and touched like a new entry: extending a chain never evicts its own head to make room
          present.refs++;
          added.push(present);
          continue;
        }
        if (this.pagesOf(tenant) >= this.pagesPerTenant && !this.evictOne(tenant)) break;
        const reservation = this.pool.reserve(sharedOwner(tenant), 1);
        if (reservation === undefined) break;
        // pinned until the call ends: caching a prompt's tail never evicts the head just cached
        const entry: CachedPage = { key, tenant, reservation, table: this.pool.acquire(reservation), refs: 1 };
        try {
          this.pool.copyPage(table, i, entry.table);
        } catch (error) {
          this.pool.release(reservation);
          throw error;
        }
        this.index.set(key, entry);
        this.lru.add(entry);
        this.tenantPages.set(tenant, this.pagesOf(tenant) + 1);
        added.push(entry);
      }
    } finally {
      for (const entry of added) entry.refs--;
      this.touch(added);
    }
  }

  /** Evicts unpinned entries of any tenant, least recently used first, until `pages` pages are free; false if it can't. */
  makeRoom(pages: number): boolean {
    while (this.pool.freePageCount < pages) if (!this.evictOne(undefined)) return false;
    return true;
  }

  /**
   * Makes a chain's entries (head first) the most recently used, the head last: a chain is evicted from its tail, so
   * what stays cached is always a reachable head (a lookup stops at the first missing page).
   */
  private touch(chain: readonly CachedPage[]): void {
    for (let i = chain.length - 1; i >= 0; i--) {
      const entry = chain[i]!;
      if (this.lru.delete(entry)) this.lru.add(entry);
    }
  }

  /**
   * key(-1): the tenant goes into every key, so no key of one tenant equals another's (I9). Protected only so that the
   * mutation self-test can seed a cache whose keys forget it (test/mutants/).
   */
  protected chainSeed(tenant: string): string {
    return createHash('sha256').update('kvfence prefix\0').update(tenant, 'utf8').digest('base64');
  }

  /** A hit is an entry of the reading table's own tenant. Protected only for the mutation self-test, as above. */
  protected hitAllowed(entry: CachedPage, table: PageTable): boolean {
    return entry.tenant === table.owner.tenant;
  }

  /**
   * An evicted entry leaves the index before its page is freed, so no lookup finds a page that is no longer its own.
   * Protected only so that the mutation self-test can seed a stale entry (test/mutants/).
   */
  protected unindex(entry: CachedPage): void {
    this.index.delete(entry.key);
  }

  /** Frees the least recently used unpinned entry (of `tenant`, or of anyone); false when there is none. */
  private evictOne(tenant: string | undefined): boolean {
    for (const entry of this.lru) {
      if (entry.refs > 0 || (tenant !== undefined && entry.tenant !== tenant)) continue;
      this.lru.delete(entry);
      this.unindex(entry);
      this.pool.release(entry.reservation);
      this.evicted++;
      const left = this.pagesOf(entry.tenant) - 1;
      if (left === 0) this.tenantPages.delete(entry.tenant);
      else this.tenantPages.set(entry.tenant, left);
      return true;
    }
    return false;
  }
}
