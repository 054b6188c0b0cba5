/**
 * Where a token's K and V live in the arena. A page holds every layer's K and V for `pageSize` consecutive tokens of
 * one sequence, contiguously, so a page is one unit to scrub, checksum and transfer:
 *
 *   page p:  [layer 0: K slot 0..pageSize-1][layer 0: V slot 0..][layer 1: K ...][layer 1: V ...] ...
 *            each slot is kvDim floats (kvHeadCount × headDim)
 */
import { assert } from '../util/assert.js';

export interface KvLayout {
  layerCount: number;
  kvDim: number;
  pageSize: number; // tokens per page
  floatsPerPage: number;
}

export function makeKvLayout(layerCount: number, kvDim: number, pageSize: number): KvLayout {
  assert(Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= 4096, `page size ${pageSize} out of range`);
  assert(layerCount >= 1 && kvDim >= 1, 'a KV layout needs layers and a KV width');
  return { layerCount, kvDim, pageSize, floatsPerPage: layerCount * 2 * pageSize * kvDim };
}

/** Float offset of (page, layer, K=0 / V=1, slot) in the arena. */
export function kvOffset(layout: KvLayout, page: number, layer: number, kOrV: 0 | 1, slot: number): number {
  return page * layout.floatsPerPage + ((layer * 2 + kOrV) * layout.pageSize + slot) * layout.kvDim;
}

export function pagesForTokens(layout: KvLayout, tokenCount: number): number {
  return Math.ceil(tokenCount / layout.pageSize);
}
