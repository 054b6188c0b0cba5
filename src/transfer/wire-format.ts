/**
 * Transfer frames: HELLO · PAGE… · COMMIT, or ABORT at any point (DESIGN §3). A frame is the body of one sealed frame
 * of the secure channel (secure-channel.ts adds the length prefix and the MAC). Layout, little-endian:
 *
 *   frame   = u8 version (2) · u8 type · binding · body
 *   binding = u8 requestLength · request (UTF-8) · u8 tenantLength · tenant (UTF-8) · nonce (16 bytes)
 *   HELLO   = u32 epoch · u32 pageCount · u32 tokenCount · u32 pageSizeTokens · u32 pageBytes
 *   PAGE    = u32 index · u32 firstToken · u32 tokenCount · u64 checksum · u32 byteLength · bytes
 *   COMMIT  = u32 pageCount · u32 tokenCount · digest (32 bytes) · u8 firstCount (1..LIMITS.choicesMax)
 *             · firstCount × (u32 firstToken · f64 firstLogprob · u8 topCount · topCount × (u32 token · f64 logprob))
 *   ABORT   = u8 codeLength · code (ASCII [a-z_]) · u16 messageLength · message (UTF-8)
 *
 * Every field is bounded by LIMITS; decoding reads each frame to its last byte.
 */

import { ByteReader, ByteWriter, utf8Bytes } from '../util/byte-cursor.js';
import { LIMITS } from '../util/limits.js';
import { DIGEST_BYTES } from './manifest.js';
import { NONCE_BYTES, type TransferBinding, type TransferTicket } from './ticket.js';
import { TransferError } from './transfer-error.js';

/**
 * 3: a PAGE's checksum is XXH3 (64-bit), where 2 and 1 carried XXH64, so a peer of another version fails at its HELLO,
 * not at its first page; 2: the COMMIT carries a first token per choice of the request (`n`), 1 carried exactly one
 */
export const WIRE_VERSION = 3;
export const FRAME_TYPES = { HELLO: 1, PAGE: 2, COMMIT: 3, ABORT: 4 } as const;
export type FrameType = keyof typeof FRAME_TYPES;
const TYPE_NAMES: readonly (FrameType | undefined)[] = [undefined, 'HELLO', 'PAGE', 'COMMIT', 'ABORT'];

export interface TokenLogprobWire {
  readonly id: number;
  readonly logprob: number;
}

/**
 * The first generated token (one per choice of an n > 1 request) travels with the COMMIT, bound to the request
 * (DESIGN §6). Same shape as the engine's.
 */
export interface FirstToken extends TokenLogprobWire {
  readonly top: readonly TokenLogprobWire[];
}

export interface PageHeader {
  readonly index: number;
  readonly firstToken: number;
  readonly tokenCount: number;
  readonly checksum: bigint;
}

export interface CommitBody {
  readonly pageCount: number;
  readonly tokenCount: number;
  readonly digest: Uint8Array; // (DIGEST_BYTES)
  /** choice i's first token at i */
  readonly firstTokens: readonly FirstToken[];
}

export interface AbortBody {
  /** an error code of the side that gives up (e.g. `context_length_exceeded`, or a TransferFailureReason) */
  readonly code: string;
  readonly message: string;
}

export type Frame =
  | { readonly type: 'HELLO'; readonly binding: TransferBinding; readonly ticket: TransferTicket }
  | { readonly type: 'PAGE'; readonly binding: TransferBinding; readonly page: PageHeader; readonly bytes: Uint8Array }
  | { readonly type: 'COMMIT'; readonly binding: TransferBinding; readonly commit: CommitBody }
  | { readonly type: 'ABORT'; readonly binding: TransferBinding; readonly abort: AbortBody };

const ABORT_CODE = /^[a-z_]{1,64}$/;

function bindingBytes(binding: TransferBinding): { request: Uint8Array; tenant: Uint8Array; size: number } {
  const request = utf8Bytes(binding.request);
  const tenant = utf8Bytes(binding.tenant);
  if (request.byteLength > LIMITS.transferIdBytesMax || tenant.byteLength > LIMITS.transferIdBytesMax) {
    throw new TransferError('malformed_frame', 'request or tenant id too long for a frame');
  }
  return { request, tenant, size: 2 + 2 + request.byteLength + tenant.byteLength + NONCE_BYTES };
}

function header(type: FrameType, binding: TransferBinding, bodySize: number): ByteWriter {
  const b = bindingBytes(binding);
  return new ByteWriter(b.size + bodySize)
    .u8(WIRE_VERSION)
    .u8(FRAME_TYPES[type])
    .u8(b.request.byteLength)
    .raw(b.request)
    .u8(b.tenant.byteLength)
    .raw(b.tenant)
    .raw(binding.nonce);
}

/** The largest binding: the longest ids (bindingBytes' size) */
const BINDING_BYTES_MAX = 2 + 2 + 2 * LIMITS.transferIdBytesMax + NONCE_BYTES;
/** The largest ABORT: the longest code and message */
const ABORT_BYTES_MAX = BINDING_BYTES_MAX + 1 + 255 + 2 + LIMITS.transferAbortMessageBytesMax;
/** The largest COMMIT: a first token for every choice, each with the most alternatives */
const COMMIT_BYTES_MAX =
  BINDING_BYTES_MAX + 8 + DIGEST_BYTES + 1 + LIMITS.choicesMax * (13 + 12 * LIMITS.topLogprobsMax);

/**
 * The longest frame a sender may send a receiver on a connection: before it is bound, a HELLO or an ABORT (its first
 * frame must be one); bound to a ticket of `pageBytes` pages, any frame of that transfer. A receiver holds a frame's
 * plaintext until its tag is checked, so this is what a peer can make it hold a connection (64 MiB otherwise).
 */
export function frameBytesMax(pageBytes?: number): number {
  const first = Math.max(BINDING_BYTES_MAX + 20, ABORT_BYTES_MAX);
  return pageBytes === undefined ? first : Math.max(first, COMMIT_BYTES_MAX, BINDING_BYTES_MAX + 24 + pageBytes);
}

/** Frames are sent as parts (header, page bytes) so a page goes from the pool to the socket without a copy. */
export function encodeHello(ticket: TransferTicket): Uint8Array[] {
  const w = header('HELLO', ticket, 20);
  w.u32(ticket.epoch).u32(ticket.pageCount).u32(ticket.tokenCount).u32(ticket.pageSizeTokens).u32(ticket.pageBytes);
  return [w.done()];
}

export function encodePage(binding: TransferBinding, page: PageHeader, bytes: Uint8Array): Uint8Array[] {
  const w = header('PAGE', binding, 24);
  w.u32(page.index).u32(page.firstToken).u32(page.tokenCount).u64(page.checksum).u32(bytes.byteLength);
  return [w.done(), bytes];
}

export function encodeCommit(binding: TransferBinding, commit: CommitBody): Uint8Array[] {
  const firsts = commit.firstTokens;
  if (firsts.length < 1 || firsts.length > LIMITS.choicesMax)
    throw new TransferError('malformed_frame', `${firsts.length} first tokens`);
  let bytes = 8 + DIGEST_BYTES + 1;
  for (const first of firsts) {
    if (first.top.length > LIMITS.topLogprobsMax)
      throw new TransferError('malformed_frame', `${first.top.length} top logprobs`);
    bytes += 12 + 1 + 12 * first.top.length;
  }
  const w = header('COMMIT', binding, bytes);
  w.u32(commit.pageCount).u32(commit.tokenCount).raw(commit.digest).u8(firsts.length);
  for (const first of firsts) {
    w.u32(first.id).f64(first.logprob).u8(first.top.length);
    for (const t of first.top) w.u32(t.id).f64(t.logprob);
  }
  return [w.done()];
}

export function encodeAbort(binding: TransferBinding, abort: AbortBody): Uint8Array[] {
  const code = ABORT_CODE.test(abort.code) ? abort.code : 'internal_error';
  let message = utf8Bytes(abort.message);
  if (message.byteLength > LIMITS.transferAbortMessageBytesMax) {
    message = message.subarray(0, LIMITS.transferAbortMessageBytesMax); // a cut message may end mid-character
    message = utf8Bytes(new TextDecoder().decode(message).replace(/\uFFFD+$/, ''));
  }
  const w = header('ABORT', binding, 1 + code.length + 2 + message.byteLength);
  w.u8(code.length).raw(utf8Bytes(code)).u16(message.byteLength).raw(message);
  return [w.done()];
}

/** Parses one frame; throws TransferError (malformed_frame, frame_truncated, page_size_mismatch) on anything else. */
export function decodeFrame(bytes: Uint8Array): Frame {
  const r = new ByteReader(bytes);
  const version = r.u8();
  if (version !== WIRE_VERSION) throw new TransferError('malformed_frame', `wire version ${version}`);
  const type = TYPE_NAMES[r.u8()];
  if (type === undefined) throw new TransferError('malformed_frame', 'unknown frame type');
  const binding: TransferBinding = {
    request: r.utf8(boundedLength(r.u8(), 'request id')),
    tenant: r.utf8(boundedLength(r.u8(), 'tenant id')),
    nonce: r.bytesView(NONCE_BYTES),
  };
  const frame = decodeBody(type, binding, r);
  r.end();
  return frame;
}

function decodeBody(type: FrameType, binding: TransferBinding, r: ByteReader): Frame {
  switch (type) {
    case 'HELLO': {
      const ticket: TransferTicket = {
        ...binding,
        epoch: r.u32(),
        pageCount: r.u32(),
        tokenCount: r.u32(),
        pageSizeTokens: r.u32(),
        pageBytes: r.u32(),
      };
      return { type, binding, ticket };
    }
    case 'PAGE': {
      const page: PageHeader = { index: r.u32(), firstToken: r.u32(), tokenCount: r.u32(), checksum: r.u64() };
      const byteLength = r.u32();
      if (byteLength > LIMITS.transferPageBytesMax)
        throw new TransferError('page_size_mismatch', `${byteLength} bytes`);
      return { type, binding, page, bytes: r.bytesView(byteLength) };
    }
    case 'COMMIT': {
      const pageCount = r.u32();
      const tokenCount = r.u32();
      const digest = r.bytesView(DIGEST_BYTES);
      const firstCount = r.u8();
      if (firstCount < 1 || firstCount > LIMITS.choicesMax)
        throw new TransferError('malformed_frame', `${firstCount} first tokens`);
      const firstTokens: FirstToken[] = [];
      for (let c = 0; c < firstCount; c++) {
        const id = r.u32();
        const logprob = r.f64();
        const topCount = r.u8();
        if (topCount > LIMITS.topLogprobsMax) throw new TransferError('malformed_frame', `${topCount} top logprobs`);
        const top: TokenLogprobWire[] = [];
        for (let i = 0; i < topCount; i++) top.push({ id: r.u32(), logprob: r.f64() });
        firstTokens.push({ id, logprob, top });
      }
      return { type, binding, commit: { pageCount, tokenCount, digest, firstTokens } };
    }
    case 'ABORT': {
      const code = r.utf8(r.u8());
      if (!ABORT_CODE.test(code)) throw new TransferError('malformed_frame', 'ABORT code is not [a-z_]{1,64}');
      const message = r.utf8(boundedLength(r.u16(), 'ABORT message', LIMITS.transferAbortMessageBytesMax));
      return { type, binding, abort: { code, message } };
    }
  }
}

function boundedLength(length: number, what: string, max: number = LIMITS.transferIdBytesMax): number {
  if (length < 1 && what !== 'ABORT message') throw new TransferError('malformed_frame', `empty ${what}`);
  if (length > max) throw new TransferError('malformed_frame', `${what} of ${length} bytes`);
  return length;
}

/** Encodes a decoded frame again (tests and fault injection re-bind frames with it). */
export function encodeFrame(frame: Frame, binding: TransferBinding = frame.binding): Uint8Array[] {
  switch (frame.type) {
    case 'HELLO':
      return encodeHello({ ...frame.ticket, ...binding });
    case 'PAGE':
      return encodePage(binding, frame.page, frame.bytes);
    case 'COMMIT':
      return encodeCommit(binding, frame.commit);
    case 'ABORT':
      return encodeAbort(binding, frame.abort);
  }
}
