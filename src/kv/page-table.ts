/**
 * A sequence's view of its KV: the pages it was granted, in token order, each with the epoch it had when granted, and
 * how many tokens have been written. Token t lives in pages[floor(t / pageSize)], slot t % pageSize. The first
 * `sharedPages` pages may be read-only prefix-cache pages of the same tenant (src/kv/prefix-cache.ts), full when attached.
 *
 *   tokens:  0 ............... sharedPages × pageSize ........ writtenTokens ........ capacity (pages.length × pageSize)
 *            [ shared, read-only ][ own, written, readable           ][ granted, not written: never read ]
 */
import type { PageOwner } from './page-owner.js';

export interface PageTable {
  readonly owner: PageOwner;
  readonly pages: number[];
  readonly epochs: number[];
  writtenTokens: number;
  /** leading pages that are shared prefix-cache pages (never written through this table) */
  sharedPages: number;
}

export function newPageTable(owner: PageOwner): PageTable {
  return { owner, pages: [], epochs: [], writtenTokens: 0, sharedPages: 0 };
}
