/**
 * Pages for an admitted request, granted the same way by the colocated engine and the prefill engine: with a prefix
 * cache, the tenant's cached pages of the prompt's head first (read-only, pinned), then its own pages for the rest.
 * The last prompt token is always computed (its logits give the first token), so a whole prompt is never taken from
 * the cache.
 */
import type { PageOwner } from '../kv/page-owner.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import { newPageTable, type PageTable } from '../kv/page-table.js';
import type { CachedPage, PrefixCache } from '../kv/prefix-cache.js';
import { assert } from '../util/assert.js';
import type { AdmissionRoom } from './admission.js';

export interface PageGrant {
  readonly table: PageTable;
  /** the request's own pages (the cached head is not in it) */
  readonly reservation: PageReservation;
  /** the chain keys of the prompt's whole pages (empty without a cache): what `publish` caches */
  readonly prefixKeys: readonly string[];
  /** the cached pages the table reads, pinned until `releaseGrant` */
  readonly prefixHits: readonly CachedPage[];
}

/**
 * The pool as admission sees it: free pages plus the cache's evictable ones; a tenant's quota counts its requests'
 * pages only (cached pages are its cache's, not its requests').
 */
export function poolRoom(
  pool: PagePool,
  cache: PrefixCache | undefined,
  running: number,
  runningMax: number,
  slotsOfTenant: (tenant: string) => number,
): AdmissionRoom {
  return {
    running,
    runningMax,
    freePages: pool.freePageCount + (cache?.evictablePages ?? 0),
    poolPages: pool.pageCount,
    pagesOfTenant: (tenant: string) => pool.requestPagesOf(tenant),
    slotsOfTenant,
  };
}

/** Admission checked `pagesNeeded` against the free and evictable pages: this cannot fail. */
export function grantPages(
  pool: PagePool,
  cache: PrefixCache | undefined,
  owner: PageOwner,
  prompt: readonly number[],
  pagesNeeded: number,
): PageGrant {
  const table = newPageTable(owner);
  let prefixKeys: string[] = [];
  let prefixHits: CachedPage[] = [];
  if (cache !== undefined) {
    prefixKeys = cache.keysOf(owner.tenant, prompt);
    prefixHits = cache.attach(table, prefixKeys, Math.floor((prompt.length - 1) / pool.layout.pageSize));
    assert(cache.makeRoom(pagesNeeded - table.sharedPages), 'admission counted the evictable cached pages');
  }
  const reservation = pool.reserve(owner, pagesNeeded - table.sharedPages);
  assert(reservation !== undefined, 'admission checked the free pages');
  pool.acquire(reservation, table);
  return { table, reservation, prefixKeys, prefixHits };
}

/** Gives back the request's own pages (scrubbed) and unpins the cached ones it read. Idempotent for the pages. */
export function releaseGrant(pool: PagePool, cache: PrefixCache | undefined, grant: PageGrant): void {
  pool.release(grant.reservation);
  cache?.detach(grant.prefixHits);
}
