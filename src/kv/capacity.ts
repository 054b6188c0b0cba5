/**
 * I1, the startup capacity proof: the largest request a server accepts (its advertised context) must fit the KV pool,
 * and fit every tenant's page quota, or the server refuses to start. With `clamp`, it advertises what fits instead,
 * and says so loudly. Nothing else decides the advertised context: `/v1/models` reports `provenContext`.
 */
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { KvLayout } from './kv-layout.js';

export interface CapacityInput {
  /** what the model file declares */
  modelContext: number;
  /** an operator's lower cap on the context, if any */
  requestedContext?: number;
  pageCount: number;
  pageSize: number;
  /** the smallest per-tenant KV page quota: one tenant's largest request must fit its own quota too (absent: none) */
  tenantPagesMin?: number;
  clamp: boolean;
}

export interface CapacityProof {
  provenContext: number;
  /** the context the proof started from (model file, or the operator's cap) */
  wantedContext: number;
  /** pages that the proven context needs; at most the pool and the smallest quota */
  pagesPerRequestMax: number;
  clamped: boolean;
  /** one line for the startup log: both numbers, and a warning when clamped */
  summary: string;
}

export function proveCapacity(input: CapacityInput): CapacityProof {
  const { pageCount, pageSize } = input;
  const tenantPagesMin = input.tenantPagesMin ?? pageCount;
  const wantedContext = Math.min(input.modelContext, input.requestedContext ?? input.modelContext);
  const pagesLimit = Math.min(pageCount, tenantPagesMin);
  const limitName =
    tenantPagesMin < pageCount
      ? `the smallest tenant KV quota of ${tenantPagesMin} pages`
      : `the KV pool of ${pageCount} pages`;
  const wantedPages = Math.ceil(wantedContext / pageSize);
  const fitTokens = pagesLimit * pageSize;
  if (wantedPages <= pagesLimit) {
    return {
      provenContext: wantedContext,
      wantedContext,
      pagesPerRequestMax: wantedPages,
      clamped: false,
      summary: `context ${wantedContext} tokens proven: needs ${wantedPages} pages of ${pageSize} tokens, ${limitName} holds ${fitTokens} tokens`,
    };
  }
  if (!input.clamp) {
    throw new KvfenceError(
      'kv_capacity_exceeded',
      `the advertised context of ${wantedContext} tokens needs ${wantedPages} KV pages of ${pageSize} tokens, but ${limitName} ` +
        `holds only ${fitTokens} tokens; give more pages (--kv-pages / --kv-memory, tenant quotas) or pass --clamp-context`,
    );
  }
  return {
    provenContext: fitTokens,
    wantedContext,
    pagesPerRequestMax: pagesLimit,
    clamped: true,
    summary:
      `WARNING: context CLAMPED from ${wantedContext} to ${fitTokens} tokens (--clamp-context): ${limitName} holds only ` +
      `${fitTokens} tokens of the ${wantedContext} wanted; requests above ${fitTokens} tokens will be rejected`,
  };
}

/** Whole pages that fit in `bytes` of KV. */
export function pageCountForMemory(layout: KvLayout, bytes: number): number {
  const pageBytes = layout.bytesPerPage;
  const count = Math.floor(bytes / pageBytes);
  if (count < 1 || count > LIMITS.kvPagesMax) {
    throw new KvfenceError(
      'invalid_argument',
      `${bytes} bytes of KV memory is ${count} pages of ${pageBytes} bytes; expected 1 to ${LIMITS.kvPagesMax}`,
    );
  }
  return count;
}

/** Parses "512MiB", "2GiB", "1.5GB", "65536" (bytes). */
export function parseByteSize(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$/i.exec(text);
  if (match === null)
    throw new KvfenceError('invalid_argument', `"${text}" is not a size (examples: 512MiB, 2GiB, 1GB)`);
  const value = Number(match[1]);
  const unit = (match[2] ?? 'B').toUpperCase();
  const binary = unit.includes('I');
  const power = { B: 0, K: 1, M: 2, G: 3, T: 4 }[unit[0] as 'B' | 'K' | 'M' | 'G' | 'T'];
  return Math.floor(value * (binary || unit === 'B' ? 1024 : 1000) ** power);
}
