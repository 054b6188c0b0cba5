/**
 * Frames over a ByteStream, each encrypted and authenticated with the session's per-direction key and the cipher the
 * handshake agreed on (see peer-auth.ts; DESIGN I10, I12):
 *
 *   sealed frame = u32 bodyLength (LE) · ciphertext (bodyLength bytes) · tag (16 bytes)
 *   ciphertext, tag = AEAD(key, nonce = zero bytes · u64 seq (LE) in the last 8, AAD = bodyLength, plaintext = body)
 *
 * The AEAD is AEGIS-256X4 (32-byte nonce) where both peers run the native addon, AES-256-GCM (12-byte nonce)
 * otherwise (frame-aead.ts). Its tag is the frame's one MAC (there is no second one): `seq` counts frames per
 * direction from 0 and never travels, so a dropped, replayed, reordered, altered or foreign frame (another session's
 * key) fails the tag, and the connection closes before any of its plaintext reaches anyone (mac_invalid). A nonce
 * never repeats under a key: each direction has its own key, fresh per session (HKDF over both sides' fresh nonces),
 * and its own counter, so the nonce is deterministic and unique, never random. Control messages (prompt token ids) and
 * KV pages cross the wire encrypted; the frame length does not (AAD). The per-page checksums of the transfer protocol
 * still travel inside (DESIGN §3). Received ciphertext is deciphered read by read as it arrives (never reassembled);
 * until a channel has an owner, what waits is bounded (two frames).
 *
 * The AEAD is most of a transfer's CPU on both sides, so the fastest both peers run is the one used: AEGIS-256X4 seals
 * and opens at several times AES-256-GCM's speed on the same AES instructions, and does not depend on which OpenSSL
 * node carries. Each frame is sealed straight into the buffer that goes on the wire and each read opened straight into
 * the frame's plaintext, with no allocation per call. docs/protocol.md §8 has the figures.
 */
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream } from './byte-stream.js';
import {
  type AeadKind,
  cipherOf,
  createFrameAead,
  type FrameAead,
  KEY_BYTES,
  nonceBytesOf,
  TAG_BYTES,
} from './frame-aead.js';
import type { FrameChannel, FrameChannelHandlers } from './frame-channel.js';

const LENGTH_BYTES = 4;

/**
 * Ciphers run over pieces of at most this size. node:crypto (without the addon) allocates each output, and outputs
 * this small come from the heap's free lists instead of fresh pages, while each call still covers enough bytes that
 * its fixed cost is small (measured, AES-256-GCM on one core: 32 KiB 3.2 GB/s, 64 KiB 3.5, 128 KiB 3.8, 256 KiB 3.7,
 * 1 MiB 3.0); the native AEAD runs 128 KiB pieces as fast as whole pages. Received pieces are the socket's reads (at
 * most 64 KiB).
 */
export const SLICE_BYTES = 128 * 1024;
/**
 * Sealed frames of at least this size (KV pages) go into buffers the stream has handed back, when one of the same size
 * is spare: a fresh buffer of a page's size is fresh memory the kernel has to fault in and zero while the seal writes
 * it, a few times the cipher's own cost with a fast AES-GCM (docs/protocol.md §8). Smaller frames get fresh buffers
 * (under 4 KiB, slices of node's shared pool).
 */
const REUSED_FRAME_BYTES_MIN = 64 * 1024;
/**
 * Spare sealed-frame buffers a channel keeps at most, in number and in bytes (the oldest go first): a sender waits for
 * `drain` after a page or two, so a transfer of uniform pages needs one or two
 */
const SPARE_FRAMES_MAX = 4;
const SPARE_BYTES_MAX = 8 * 1024 * 1024;

/** The nonce of a direction's frame `seq` under `kind`'s cipher: zero bytes, then seq as a u64 (LE); it never travels */
export function sealNonce(seq: number, kind: AeadKind): Uint8Array {
  const nonce = new Uint8Array(nonceBytesOf(cipherOf(kind)));
  new DataView(nonce.buffer).setBigUint64(nonce.byteLength - 8, BigInt(seq), true);
  return nonce;
}

/** A received frame whose length is read and whose tag is not yet checked (its opening has started). */
interface OpeningFrame {
  readonly length: number;
  /** ciphertext bytes still to come */
  cipherLeft: number;
  /** plaintext bytes written into the buffer so far */
  filled: number;
}

export class SecureChannel implements FrameChannel {
  private sendSeq = 0;
  private receiveSeq = 0;
  private readonly chunks: Uint8Array[] = [];
  /** a frame's plaintext, reused: a frame's bytes are valid only during its handler call */
  private plain = new Uint8Array(0);
  /** the frame being deciphered, from its length prefix to its tag */
  private opening: OpeningFrame | undefined;
  private bufferedBytes = 0;
  private handlers: FrameChannelHandlers | undefined;
  private needDrain = false;
  private drainWaiters: { resolve: () => void; reject: (e: TransferError) => void }[] = [];
  private closeError: TransferError | undefined;
  private isClosed = false;
  private closeReported = false;
  private readonly sealer: FrameAead;
  private readonly opener: FrameAead;
  /** sealed frames' buffers the stream no longer holds (ciphertext only), for the next frames of their size */
  private readonly spares: Uint8Array[] = [];
  /** the longest frame the peer may send (limitFrames) */
  private frameLimit = LIMITS.transferFrameBytesMax;

  /** `aead`: what the handshake agreed on (peer-auth.ts), the same cipher both ways */
  constructor(
    private readonly stream: ByteStream,
    sendKey: Uint8Array,
    receiveKey: Uint8Array,
    leftover: Uint8Array | undefined,
    readonly aead: AeadKind,
  ) {
    assert(sendKey.byteLength === KEY_BYTES && receiveKey.byteLength === KEY_BYTES, 'session keys are 32 bytes');
    this.sealer = createFrameAead(sendKey, true, aead);
    this.opener = createFrameAead(receiveKey, false, aead);
    if (leftover !== undefined && leftover.byteLength > 0) this.push(leftover);
    stream.setHandlers({
      data: (bytes) => {
        this.push(bytes);
        this.parse();
        this.keepUnparsed(bytes);
      },
      drain: () => {
        this.needDrain = false;
        for (const w of this.drainWaiters.splice(0)) w.resolve();
      },
      close: (error) => this.onStreamClose(error),
    });
  }

  get closed(): boolean {
    return this.isClosed;
  }

  limitFrames(bytes: number): void {
    assert(Number.isInteger(bytes) && bytes >= 1 && bytes <= LIMITS.transferFrameBytesMax, `a frame limit of ${bytes}`);
    this.frameLimit = bytes;
  }

  send(parts: readonly Uint8Array[]): boolean {
    if (this.isClosed) return false;
    let length = 0;
    for (const p of parts) length += p.byteLength;
    assert(length >= 1 && length <= LIMITS.transferFrameBytesMax, `frame of ${length} bytes`);
    // a nonce must never repeat under a key; 2^53 frames on one connection would take centuries
    assert(this.sendSeq < Number.MAX_SAFE_INTEGER, 'frame counter exhausted');
    let sealed: Uint8Array;
    try {
      sealed = this.seal(parts, length);
    } catch (error) {
      // the frame's nonce is spent and nothing went out: no later frame could pass the peer's tag check, so the
      // channel ends here rather than at the peer
      this.fail(new TransferError('connection_closed', `sealing frame ${this.sendSeq - 1} failed: ${String(error)}`));
      throw error;
    }
    const reuse = sealed.byteLength >= REUSED_FRAME_BYTES_MIN;
    const ok = this.stream.write([sealed], reuse ? () => this.spare(sealed) : undefined);
    if (!ok) this.needDrain = true;
    return ok;
  }

  /**
   * The next frame as it goes on the wire: length prefix, ciphertext, tag. Uninitialised memory or an earlier frame's
   * spare buffer of the same size (a zero fill would be a third pass over every page), so every byte is written here
   * before the frame leaves (asserted).
   */
  private seal(parts: readonly Uint8Array[], length: number): Uint8Array {
    const size = LENGTH_BYTES + length + TAG_BYTES;
    const spare = size >= REUSED_FRAME_BYTES_MIN ? this.spares.findIndex((b) => b.byteLength === size) : -1;
    const sealed = spare >= 0 ? this.spares.splice(spare, 1)[0]! : Buffer.allocUnsafe(size);
    const header = sealed.subarray(0, LENGTH_BYTES);
    new DataView(sealed.buffer, sealed.byteOffset).setUint32(0, length, true);
    this.sealer.start(sealNonce(this.sendSeq++, this.aead), header);
    let at = LENGTH_BYTES;
    for (const p of parts) {
      for (let from = 0; from < p.byteLength; from += SLICE_BYTES) {
        const piece = p.subarray(from, from + SLICE_BYTES);
        this.sealer.update(piece, sealed, at);
        at += piece.byteLength;
      }
    }
    assert(at === LENGTH_BYTES + length, 'the frame is sealed whole');
    this.sealer.finishSeal(sealed.subarray(at), sealed, at);
    return sealed;
  }

  /** A sealed frame's buffer the stream has let go of: kept for a later frame of its size, within the bounds. */
  private spare(buffer: Uint8Array): void {
    if (this.isClosed || buffer.byteLength > SPARE_BYTES_MAX) return;
    this.spares.push(buffer);
    let bytes = 0;
    for (const b of this.spares) bytes += b.byteLength;
    while (this.spares.length > SPARE_FRAMES_MAX || bytes > SPARE_BYTES_MAX) bytes -= this.spares.shift()!.byteLength;
  }

  drained(timeoutMs: number): Promise<void> {
    if (this.isClosed) return Promise.reject(this.closeError ?? new TransferError('connection_closed', 'closed'));
    if (!this.needDrain) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.drainWaiters = this.drainWaiters.filter((w) => w !== waiter);
        reject(new TransferError('backpressure_timeout', `the peer read nothing for ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (e: TransferError) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.drainWaiters.push(waiter);
    });
  }

  setHandlers(handlers: FrameChannelHandlers): void {
    assert(this.handlers === undefined, 'a channel has one owner');
    this.handlers = handlers;
    this.parse();
    if (this.isClosed) this.reportClose();
  }

  end(): void {
    if (!this.isClosed) this.stream.end();
  }

  destroy(error?: TransferError): void {
    if (this.isClosed) return;
    this.fail(error ?? new TransferError('connection_closed', 'closed by this side'));
  }

  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.bufferedBytes += bytes.byteLength;
    // bounded: one whole frame plus what the stream hands over at once; more means nobody is reading
    if (this.bufferedBytes > 2 * (LIMITS.transferFrameBytesMax + LENGTH_BYTES + TAG_BYTES)) {
      this.fail(new TransferError('frame_too_large', 'receive buffer over its bound'));
    }
  }

  /**
   * The stream lends each read for its call only: what is left of `read` after parsing (a length or tag split across
   * reads, or frames waiting for an owner) is copied. Only the newest chunk can still be part of it; older ones were
   * copied in their turn.
   */
  private keepUnparsed(read: Uint8Array): void {
    const last = this.chunks.length - 1;
    if (last >= 0 && this.chunks[last]!.buffer === read.buffer) this.chunks[last] = new Uint8Array(this.chunks[last]!);
  }

  /**
   * Deciphers what is buffered as it arrives and delivers each frame once its tag checks out, in order, while there is
   * an owner and the channel is open. A frame's ciphertext is never reassembled: each read is deciphered straight into
   * the frame's plaintext buffer, so the work keeps pace with the socket instead of waiting for a frame's last byte.
   * Nothing of the plaintext is used before `final` has checked the tag: a forged frame fails closed, whole.
   */
  private parse(): void {
    while (this.handlers !== undefined && !this.isClosed) {
      const frame = this.opening ?? this.open();
      if (frame === undefined) return;
      if (frame.cipherLeft > 0) {
        if (this.bufferedBytes === 0 || !this.decipherBody(frame) || frame.cipherLeft > 0) return;
      }
      if (this.bufferedBytes < TAG_BYTES) return;
      this.opening = undefined;
      if (!this.checkTag(frame, this.take(TAG_BYTES))) return;
      this.handlers.frame(this.plain.subarray(0, frame.length));
    }
  }

  /** Reads the next frame's length and starts its decipher; undefined when too few bytes or out of bounds (closed). */
  private open(): OpeningFrame | undefined {
    if (this.bufferedBytes < LENGTH_BYTES) return undefined;
    const header = this.take(LENGTH_BYTES);
    const length = new DataView(header.buffer).getUint32(0, true);
    if (length < 1 || length > this.frameLimit) {
      this.fail(new TransferError('frame_too_large', `sealed frame declares ${length} bytes, over ${this.frameLimit}`));
      return undefined;
    }
    this.opener.start(sealNonce(this.receiveSeq++, this.aead), header);
    this.opening = { length, cipherLeft: length, filled: 0 };
    return this.opening;
  }

  /** Deciphers the buffered ciphertext of `frame` (up to its end) into the plaintext buffer; false when closed. */
  private decipherBody(frame: OpeningFrame): boolean {
    const count = Math.min(frame.cipherLeft, this.bufferedBytes);
    // the plaintext buffer grows with the ciphertext that came, not with the length a frame declares: four bytes
    // declaring 64 MiB must not cost 64 MiB
    if (this.plain.byteLength < frame.filled + count) {
      const grown = new Uint8Array(Math.min(frame.length, Math.max(frame.filled + count, 2 * this.plain.byteLength)));
      grown.set(this.plain.subarray(0, frame.filled));
      this.plain = grown;
    }
    try {
      this.consume(count, (piece) => {
        this.opener.update(piece, this.plain, frame.filled);
        frame.filled += piece.byteLength;
      });
    } catch {
      return this.failTag();
    }
    frame.cipherLeft -= count;
    return true;
  }

  /** Checks `frame`'s tag and that its whole plaintext came out; false (closed) when not. */
  private checkTag(frame: OpeningFrame, tag: Uint8Array): boolean {
    return (this.opener.finishOpen(tag, this.plain, frame.filled) && frame.filled === frame.length) || this.failTag();
  }

  private failTag(): false {
    this.fail(new TransferError('mac_invalid', `frame ${this.receiveSeq - 1} fails its MAC (AEAD tag)`));
    return false;
  }

  /** Hands the next `count` buffered bytes to `visit` in pieces of at most SLICE_BYTES, and drops them. */
  private consume(count: number, visit: (piece: Uint8Array) => void): void {
    let left = count;
    while (left > 0) {
      const c = this.chunks[0]!;
      const n = Math.min(c.byteLength, left, SLICE_BYTES);
      visit(c.subarray(0, n));
      left -= n;
      if (n === c.byteLength) this.chunks.shift();
      else this.chunks[0] = c.subarray(n);
    }
    this.bufferedBytes -= count;
  }

  /** The next `count` (a few) buffered bytes, as a copy. */
  private take(count: number): Uint8Array {
    const out = new Uint8Array(count);
    let filled = 0;
    this.consume(count, (piece) => {
      out.set(piece, filled);
      filled += piece.byteLength;
    });
    return out;
  }

  private onStreamClose(error: Error | undefined): void {
    if (this.isClosed) return;
    this.parse(); // frames that arrived whole before the close still count
    if (this.isClosed) return;
    if (this.bufferedBytes > 0 || this.opening !== undefined) {
      const into = this.opening === undefined ? 0 : this.opening.length - this.opening.cipherLeft;
      this.fail(
        new TransferError('frame_truncated', `connection closed ${into + this.bufferedBytes} bytes into a frame`),
      );
    } else if (error !== undefined) {
      this.fail(error instanceof TransferError ? error : new TransferError('connection_closed', error.message));
    } else {
      this.isClosed = true;
      this.letGo();
      this.settleDrainWaiters(new TransferError('connection_closed', 'the peer closed the connection'));
      this.reportClose();
    }
  }

  private fail(error: TransferError): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closeError = error;
    this.chunks.length = 0;
    this.bufferedBytes = 0;
    this.opening = undefined;
    this.plain = new Uint8Array(0);
    this.letGo();
    this.settleDrainWaiters(error);
    this.stream.destroy(error);
    this.reportClose();
  }

  /**
   * A closed channel seals and opens nothing more: its spare buffers go, and its AEADs drop their keys now rather than
   * at garbage collection (the native one frees its context, which cleanses the expanded key; node:crypto's own
   * cipher objects keep theirs until collected).
   */
  private letGo(): void {
    this.spares.length = 0;
    this.sealer.dispose();
    this.opener.dispose();
  }

  private settleDrainWaiters(error: TransferError): void {
    for (const w of this.drainWaiters.splice(0)) w.reject(error);
  }

  private reportClose(): void {
    if (this.closeReported || this.handlers === undefined) return;
    this.closeReported = true;
    this.handlers.close(this.closeError);
  }
}
