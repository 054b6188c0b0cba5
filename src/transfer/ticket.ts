/**
 * The ticket a decode worker issues when it reserves pages for a request (DESIGN §3 step 1), and the binding every
 * transfer frame carries. The nonce is one-time and random (node:crypto), so frames of one request can never pass as
 * another's, even when request ids repeat across restarts.
 */
import { randomBytes } from 'node:crypto';
import { utf8Bytes } from '../util/byte-cursor.js';
import { LIMITS } from '../util/limits.js';

export const NONCE_BYTES = 16;

/** What binds a frame to one reservation: request id (made by the gateway), tenant, one-time nonce. */
export interface TransferBinding {
  readonly request: string;
  readonly tenant: string;
  readonly nonce: Uint8Array; // (NONCE_BYTES)
}

export interface TransferTicket extends TransferBinding {
  /** the reservation's epoch on the decode side: tells one reservation of a request id from a later one */
  readonly epoch: number;
  readonly pageCount: number;
  readonly tokenCount: number;
  readonly pageSizeTokens: number;
  /** bytes of one whole page (all layers' K and V for pageSizeTokens tokens) */
  readonly pageBytes: number;
}

export function newNonce(): Uint8Array {
  return new Uint8Array(randomBytes(NONCE_BYTES));
}

/** Why a ticket's fields cannot be sent; undefined when they are within bounds and consistent. */
export function ticketProblem(ticket: TransferTicket): string | undefined {
  for (const [name, text] of [
    ['request', ticket.request],
    ['tenant', ticket.tenant],
  ] as const) {
    const length = utf8Bytes(text).byteLength;
    if (length < 1 || length > LIMITS.transferIdBytesMax) return `${name} id is ${length} bytes`;
  }
  if (ticket.nonce.byteLength !== NONCE_BYTES) return `nonce is ${ticket.nonce.byteLength} bytes`;
  const u32 = (v: number) => Number.isInteger(v) && v >= 0 && v <= 0xffff_ffff;
  if (!u32(ticket.epoch)) return `epoch ${ticket.epoch} is not a u32`;
  if (!u32(ticket.pageSizeTokens) || ticket.pageSizeTokens < 1 || ticket.pageSizeTokens > LIMITS.pageSizeTokensMax) {
    return `page size ${ticket.pageSizeTokens} out of range`;
  }
  if (!u32(ticket.tokenCount) || ticket.tokenCount < 1) return `token count ${ticket.tokenCount} out of range`;
  if (!u32(ticket.pageCount) || ticket.pageCount > LIMITS.transferPagesMax) return `page count ${ticket.pageCount}`;
  if (ticket.pageCount !== Math.ceil(ticket.tokenCount / ticket.pageSizeTokens)) {
    return `${ticket.pageCount} pages do not hold exactly ${ticket.tokenCount} tokens of ${ticket.pageSizeTokens}`;
  }
  if (!u32(ticket.pageBytes) || ticket.pageBytes < 1 || ticket.pageBytes > LIMITS.transferPageBytesMax) {
    return `page bytes ${ticket.pageBytes} out of range`;
  }
  return undefined;
}

/** Tokens held by page `index` of a transfer: every page is full except perhaps the last. */
export function pageTokenCount(ticket: TransferTicket, index: number): number {
  return Math.min(ticket.pageSizeTokens, ticket.tokenCount - index * ticket.pageSizeTokens);
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}
