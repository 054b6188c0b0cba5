/**
 * Frames over a ByteStream, each sealed with the session's per-direction key (see peer-auth.ts):
 *
 *   sealed frame = u32 bodyLength (LE) · body · tag (16 bytes)
 *   tag          = ChaCha20-Poly1305(key, nonce = 0x00000000 · u64 seq (LE)) over AAD = bodyLength · body
 *
 * `seq` counts frames per direction from 0 and never travels: a dropped, replayed, reordered or foreign frame (another
 * session's key) fails the MAC, and the connection closes before the body reaches anyone (mac_invalid). Bodies are
 * authenticated, not encrypted. The reassembly buffer holds at most one frame plus one read.
 */
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream } from './byte-stream.js';
import type { FrameChannel, FrameChannelHandlers } from './frame-channel.js';

export const TAG_BYTES = 16;
const LENGTH_BYTES = 4;
const KEY_BYTES = 32;

function sealNonce(seq: number): Uint8Array {
  const nonce = new Uint8Array(12);
  new DataView(nonce.buffer).setBigUint64(4, BigInt(seq), true);
  return nonce;
}

export class SecureChannel implements FrameChannel {
  private sendSeq = 0;
  private receiveSeq = 0;
  private readonly chunks: Uint8Array[] = [];
  /** reassembly space for frames that span reads, reused: a frame's bytes are valid only during its handler call */
  private scratch = new Uint8Array(0);
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
    const cipher = createCipheriv('chacha20-poly1305', this.sendKey, sealNonce(this.sendSeq++), {
      authTagLength: TAG_BYTES,
    });
    cipher.setAAD(header, { plaintextLength: 0 });
    for (const p of parts) cipher.setAAD(p, { plaintextLength: 0 });
    cipher.final();
    const ok = this.stream.write([header, ...parts, new Uint8Array(cipher.getAuthTag())]);
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

  /** Delivers every whole frame in the buffer, in order, while there is an owner and the channel is open. */
  private parse(): void {
    while (this.handlers !== undefined && !this.isClosed && this.bufferedBytes >= LENGTH_BYTES) {
      const length = this.peekLength();
      if (length < 1 || length > LIMITS.transferFrameBytesMax) {
        this.fail(new TransferError('frame_too_large', `sealed frame declares ${length} bytes`));
        return;
      }
      const total = LENGTH_BYTES + length + TAG_BYTES;
      if (this.bufferedBytes < total) return;
      const sealed = this.take(total);
      const decipher = createDecipheriv('chacha20-poly1305', this.receiveKey, sealNonce(this.receiveSeq++), {
        authTagLength: TAG_BYTES,
      });
      decipher.setAAD(sealed.subarray(0, LENGTH_BYTES + length), { plaintextLength: 0 });
      decipher.setAuthTag(sealed.subarray(LENGTH_BYTES + length));
      try {
        decipher.final();
      } catch {
        this.fail(new TransferError('mac_invalid', `frame ${this.receiveSeq - 1} fails its MAC`));
        return;
      }
      this.handlers.frame(sealed.subarray(LENGTH_BYTES, LENGTH_BYTES + length));
    }
  }

  private peekLength(): number {
    const head = new Uint8Array(LENGTH_BYTES);
    let filled = 0;
    for (const c of this.chunks) {
      const n = Math.min(c.byteLength, LENGTH_BYTES - filled);
      head.set(c.subarray(0, n), filled);
      filled += n;
      if (filled === LENGTH_BYTES) break;
    }
    return new DataView(head.buffer).getUint32(0, true);
  }

  /** The next `count` buffered bytes, contiguous: a view when one chunk holds them, else one copy into `scratch`. */
  private take(count: number): Uint8Array {
    const first = this.chunks[0]!;
    let out: Uint8Array;
    if (first.byteLength >= count) {
      out = first.subarray(0, count);
      if (first.byteLength === count) this.chunks.shift();
      else this.chunks[0] = first.subarray(count);
    } else {
      if (this.scratch.byteLength < count) this.scratch = new Uint8Array(Math.max(count, 2 * this.scratch.byteLength));
      out = this.scratch.subarray(0, count);
      let filled = 0;
      while (filled < count) {
        const c = this.chunks[0]!;
        const n = Math.min(c.byteLength, count - filled);
        out.set(c.subarray(0, n), filled);
        filled += n;
        if (n === c.byteLength) this.chunks.shift();
        else this.chunks[0] = c.subarray(n);
      }
    }
    this.bufferedBytes -= count;
    return out;
  }

  private onStreamClose(error: Error | undefined): void {
    if (this.isClosed) return;
    this.parse(); // frames that arrived whole before the close still count
    if (this.isClosed) return;
    if (this.bufferedBytes > 0) {
      this.fail(new TransferError('frame_truncated', `connection closed ${this.bufferedBytes} bytes into a frame`));
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
    this.scratch = new Uint8Array(0);
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
