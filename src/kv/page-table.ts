/**
 * A sequence's view of its KV: the pages it was granted, in token order, each with the epoch it had when granted, and
 * how many tokens have been written. Token t lives in pages[floor(t / pageSize)], slot t % pageSize.
 *
 *   tokens:  0 ............................ writtenTokens ........ capacity (pages.length × pageSize)
 *            [ written, readable          ][ granted, not written: never read ]
 */
import type { PageOwner } from './page-owner.js';

export interface PageTable {
  readonly owner: PageOwner;
  readonly pages: number[];
  readonly epochs: number[];
  writtenTokens: number;
}

export function newPageTable(owner: PageOwner): PageTable {
  return { owner, pages: [], epochs: [], writtenTokens: 0 };
}
