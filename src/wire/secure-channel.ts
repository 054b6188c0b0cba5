/**
 * Frames over a ByteStream, each encrypted and authenticated with the session's per-direction key (see peer-auth.ts;
 * DESIGN I10, I12):
 *
 *   sealed frame = u32 bodyLength (LE) · ciphertext (bodyLength bytes) · tag (16 bytes)
 *   ciphertext, tag = AES-256-GCM(key, nonce = 0x00000000 · u64 seq (LE), AAD = bodyLength, plaintext = body)
 *
 * The AEAD tag is the frame's one MAC (there is no second one): `seq` counts frames per direction from 0 and never
 * travels, so a dropped, replayed, reordered, altered or foreign frame (another session's key) fails the tag, and the
 * connection closes before any of its plaintext reaches anyone (mac_invalid). A nonce never repeats under a key: each
 * direction has its own key, fresh per session (HKDF over both sides' fresh nonces), and its own counter, so the
 * 96-bit GCM nonce is deterministic and unique, never random. Control messages (prompt token ids) and KV pages cross
 * the wire encrypted; the frame length does not (AAD). The per-page checksums of the transfer protocol still travel
 * inside (DESIGN §3). Received ciphertext is deciphered read by read as it arrives (never reassembled); until a channel
 * has an owner, what waits is bounded (two frames).
 *
 * AES-256-GCM rather than ChaCha20-Poly1305 (since version 3 of the handshake): the AEAD is most of a transfer's CPU on both
 * sides, and GCM runs on the AES and carry-less-multiply instructions of every x86-64 and arm64 server this runs on
 * (a little faster than ChaCha20-Poly1305 on x86-64 with node 20's OpenSSL 3.0, several times faster on arm64 and with
 * the VAES code of newer OpenSSL). docs/protocol.md §8 has the figures.
 */
import { createCipheriv, createDecipheriv, type DecipherGCM } from 'node:crypto';
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream } from './byte-stream.js';
import type { FrameChannel, FrameChannelHandlers } from './frame-channel.js';

export const TAG_BYTES = 16;
const LENGTH_BYTES = 4;
const KEY_BYTES = 32;
/** the AEAD of every frame (bench/transfer.ts names and measures it); peer-auth.ts's version names it */
export const AEAD = 'aes-256-gcm';

/**
 * Ciphers run over pieces of at most this size: node:crypto allocates each output, and outputs this small come from
 * the heap's free lists instead of fresh pages (a 1 MiB output per page costs page faults on both sides), while each
 * call still covers enough bytes that its fixed cost is small (measured, AES-256-GCM on one core: 32 KiB 3.2 GB/s,
 * 64 KiB 3.5, 128 KiB 3.8, 256 KiB 3.7, 1 MiB 3.0). Received pieces are the socket's reads (at most 64 KiB).
 */
export const SLICE_BYTES = 128 * 1024;

function sealNonce(seq: number): Uint8Array {
  const nonce = new Uint8Array(12);
  new DataView(nonce.buffer).setBigUint64(4, BigInt(seq), true);
  return nonce;
}

/** A received frame whose length is read and whose tag is not yet checked. */
interface OpeningFrame {
  readonly length: number;
  readonly decipher: DecipherGCM;
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

  constructor(
    private readonly stream: ByteStream,
    private readonly sendKey: Uint8Array,
    private readonly receiveKey: Uint8Array,
    leftover: Uint8Array | undefined,
  ) {
    assert(sendKey.byteLength === KEY_BYTES && receiveKey.byteLength === KEY_BYTES, 'session keys are 32 bytes');
    if (leftover !== undefined && leftover.byteLength > 0) this.push(leftover);
    stream.setHandlers({
      data: (bytes) => {
        this.push(bytes);
        this.parse();
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

  send(parts: readonly Uint8Array[]): boolean {
    if (this.isClosed) return false;
    let length = 0;
    for (const p of parts) length += p.byteLength;
    assert(length >= 1 && length <= LIMITS.transferFrameBytesMax, `frame of ${length} bytes`);
    const header = new Uint8Array(LENGTH_BYTES);
    new DataView(header.buffer).setUint32(0, length, true);
    // a nonce must never repeat under a key; 2^53 frames on one connection would take centuries
    assert(this.sendSeq < Number.MAX_SAFE_INTEGER, 'frame counter exhausted');
    const cipher = createCipheriv(AEAD, this.sendKey, sealNonce(this.sendSeq++), { authTagLength: TAG_BYTES });
    cipher.setAAD(header, { plaintextLength: length });
    const sealed: Uint8Array[] = [header];
    for (const p of parts) {
      for (let at = 0; at < p.byteLength; at += SLICE_BYTES)
        sealed.push(cipher.update(p.subarray(at, at + SLICE_BYTES)));
    }
    sealed.push(cipher.final(), cipher.getAuthTag());
    const ok = this.stream.write(sealed);
    if (!ok) this.needDrain = true;
    return ok;
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
    if (length < 1 || length > LIMITS.transferFrameBytesMax) {
      this.fail(new TransferError('frame_too_large', `sealed frame declares ${length} bytes`));
      return undefined;
    }
    const decipher = createDecipheriv(AEAD, this.receiveKey, sealNonce(this.receiveSeq++), {
      authTagLength: TAG_BYTES,
    });
    decipher.setAAD(header, { plaintextLength: length });
    if (this.plain.byteLength < length) {
      this.plain = new Uint8Array(Math.min(LIMITS.transferFrameBytesMax, Math.max(length, 2 * this.plain.byteLength)));
    }
    this.opening = { length, decipher, cipherLeft: length, filled: 0 };
    return this.opening;
  }

  /** Deciphers the buffered ciphertext of `frame` (up to its end) into the plaintext buffer; false when closed. */
  private decipherBody(frame: OpeningFrame): boolean {
    const count = Math.min(frame.cipherLeft, this.bufferedBytes);
    try {
      this.consume(count, (piece) => {
        const out = frame.decipher.update(piece);
        this.plain.set(out, frame.filled);
        frame.filled += out.byteLength;
      });
    } catch {
      return this.failTag();
    }
    frame.cipherLeft -= count;
    return true;
  }

  /** Checks `frame`'s tag and that its whole plaintext came out; false (closed) when not. */
  private checkTag(frame: OpeningFrame, tag: Uint8Array): boolean {
    try {
      frame.decipher.setAuthTag(tag);
      const rest = frame.decipher.final();
      this.plain.set(rest, frame.filled);
      frame.filled += rest.byteLength;
    } catch {
      return this.failTag();
    }
    return frame.filled === frame.length || this.failTag();
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
    this.settleDrainWaiters(error);
    this.stream.destroy(error);
    this.reportClose();
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
