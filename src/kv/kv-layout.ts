/**
 * Where a token's K and V live in the arena. A page holds every layer's K and V for `pageSize` consecutive tokens of
 * one sequence, contiguously, so a page is one unit to scrub, checksum and transfer:
 *
 *   page p:  [layer 0: K slot 0..pageSize-1][layer 0: V slot 0..][layer 1: K ...][layer 1: V ...] ...
 *            each slot is kvDim values (kvHeadCount × headDim)
 *
 * Values are IEEE halves (f16, rounded to nearest even when stored), as llama.cpp's default KV cache keeps them:
 * half the bytes of f32 for every page to hold, scrub, checksum and transfer, and for decode's attention to read.
 */
import { assert } from '../util/assert.js';

/** The arena: every page's values as f16 bits. */
export type KvArena = Uint16Array;

/** Bytes of one stored K or V value. */
export const KV_VALUE_BYTES = Uint16Array.BYTES_PER_ELEMENT;

export interface KvLayout {
  layerCount: number;
  kvDim: number;
  pageSize: number; // tokens per page
  valuesPerPage: number;
  bytesPerPage: number;
}

export function makeKvLayout(layerCount: number, kvDim: number, pageSize: number): KvLayout {
  assert(Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= 4096, `page size ${pageSize} out of range`);
  assert(layerCount >= 1 && kvDim >= 1, 'a KV layout needs layers and a KV width');
  const valuesPerPage = layerCount * 2 * pageSize * kvDim;
  return { layerCount, kvDim, pageSize, valuesPerPage, bytesPerPage: valuesPerPage * KV_VALUE_BYTES };
}

/** Value offset of (page, layer, K=0 / V=1, slot) in the arena. */
export function kvOffset(layout: KvLayout, page: number, layer: number, kOrV: 0 | 1, slot: number): number {
  return page * layout.valuesPerPage + ((layer * 2 + kOrV) * layout.pageSize + slot) * layout.kvDim;
}

export function pagesForTokens(layout: KvLayout, tokenCount: number): number {
  return Math.ceil(tokenCount / layout.pageSize);
}
