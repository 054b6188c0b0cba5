/**
 * Fault injection, for tests only. Nothing here runs unless a test wraps a channel or a stream explicitly; an empty
 * plan changes nothing. Frame faults act above the MAC (what a buggy or confused authenticated peer would send, so the
 * receiver's own checks are exercised); byte faults act below it, on the wire (so the MAC and framing are).
 *
 * Frames are counted from 0 on the wrapped channel: 0 = HELLO, 1..n = PAGE, n+1 = COMMIT.
 */

import type { TransferBinding } from '../../src/transfer/ticket.js';
import { decodeFrame, encodeFrame } from '../../src/transfer/wire-format.js';
import type { ByteStream, ByteStreamHandlers } from '../../src/wire/byte-stream.js';
import type { FrameChannel, FrameChannelHandlers } from '../../src/wire/frame-channel.js';

export type FrameFault =
  | { readonly kind: 'drop' | 'duplicate' | 'reorder' | 'stall' | 'close'; readonly frame: number }
  | { readonly kind: 'corrupt'; readonly frame: number; readonly byteIndex: number }
  | { readonly kind: 'truncate'; readonly frame: number; readonly keepBytes: number }
  | { readonly kind: 'delay'; readonly frame: number; readonly delayMs: number }
  | { readonly kind: 'wrong_nonce' | 'wrong_tenant' | 'wrong_request'; readonly frame: number }
  /** a COMMIT whose first token is no token: a positive logprob, an alternative outside any vocabulary */
  | { readonly kind: 'bad_first_token'; readonly frame: number }
  /** sends a frame recorded from another transfer before frame `frame` */
  | { readonly kind: 'replay'; readonly frame: number; readonly recorded: readonly Uint8Array[] };

function concat(parts: readonly Uint8Array[]): Uint8Array {
  return Buffer.concat(parts);
}

function rebind(parts: readonly Uint8Array[], change: (b: TransferBinding) => TransferBinding): Uint8Array[] {
  const frame = decodeFrame(concat(parts));
  return encodeFrame(frame, change(frame.binding));
}

/** Wraps a channel so its outgoing frames suffer `faults`. Incoming frames and closes pass through unchanged. */
export class FaultyFrameChannel implements FrameChannel {
  private sent = 0;
  private held: Uint8Array[] | undefined; // a frame held back by `reorder`
  private stalled = false;
  private queue: Promise<void> = Promise.resolve(); // keeps order behind a delayed frame
  private delaying = false;
  /** every frame that went out, for `replay` faults of another transfer */
  readonly record: Uint8Array[] = [];

  constructor(
    private readonly inner: FrameChannel,
    private readonly faults: readonly FrameFault[],
  ) {}

  get closed(): boolean {
    return this.inner.closed;
  }

  setHandlers(handlers: FrameChannelHandlers): void {
    this.inner.setHandlers(handlers);
  }

  drained(timeoutMs: number): Promise<void> {
    return this.inner.drained(timeoutMs);
  }

  end(): void {
    this.inner.end();
  }

  limitFrames(bytes: number): void {
    this.inner.limitFrames(bytes);
  }

  destroy(error?: Parameters<FrameChannel['destroy']>[0]): void {
    this.inner.destroy(error);
  }

  send(parts: readonly Uint8Array[]): boolean {
    const index = this.sent++;
    const fault = this.faults.find((f) => f.frame === index);
    if (this.stalled || fault?.kind === 'stall') {
      this.stalled = true;
      return true;
    }
    let frame = [...parts];
    switch (fault?.kind) {
      case undefined:
        break;
      case 'drop':
        return true;
      case 'close':
        this.inner.end();
        return true;
      case 'corrupt': {
        const bytes = concat(frame);
        bytes[fault.byteIndex % bytes.byteLength]! ^= 0x5a;
        frame = [bytes];
        break;
      }
      case 'truncate':
        frame = [concat(frame).subarray(0, fault.keepBytes)];
        break;
      case 'duplicate':
        this.out(frame);
        break;
      case 'reorder':
        this.held = frame;
        return true;
      case 'delay':
        this.delaying = true;
        this.queue = new Promise((resolve) => setTimeout(resolve, fault.delayMs)).then(() => {
          this.delaying = false;
        });
        break;
      case 'wrong_nonce':
        frame = rebind(frame, (b) => ({ ...b, nonce: b.nonce.map((x) => x ^ 0xff) }));
        break;
      case 'wrong_tenant':
        frame = rebind(frame, (b) => ({ ...b, tenant: `${b.tenant}-other` }));
        break;
      case 'wrong_request':
        frame = rebind(frame, (b) => ({ ...b, request: `${b.request}-other` }));
        break;
      case 'replay':
        for (const r of fault.recorded) this.out([r]);
        break;
      case 'bad_first_token': {
        const commit = decodeFrame(concat(frame));
        if (commit.type !== 'COMMIT') throw new Error(`frame ${index} is a ${commit.type}, not the COMMIT`);
        const firstTokens = commit.commit.firstTokens.map((f) => ({
          ...f,
          logprob: 1,
          top: [{ id: 0xfffffff0, logprob: Number.NaN }, ...f.top.slice(1)],
        }));
        frame = encodeFrame({ ...commit, commit: { ...commit.commit, firstTokens } });
        break;
      }
    }
    this.out(frame);
    if (this.held !== undefined) {
      const held = this.held;
      this.held = undefined;
      this.out(held);
    }
    return true;
  }

  private out(parts: readonly Uint8Array[]): void {
    const copy = concat(parts); // the caller may reuse its buffers once send returns
    this.record.push(copy);
    if (!this.delaying) {
      this.inner.send([copy]);
      return;
    }
    this.queue = this.queue.then(() => {
      if (!this.inner.closed) this.inner.send([copy]);
    });
  }
}

export interface ByteFaultPlan {
  /** flips the byte at this offset of the outgoing stream (handshake included) */
  readonly corruptByteAt?: number;
  /** writes only this many bytes of the outgoing stream, then drops the connection (mid-frame close) */
  readonly cutAfterBytes?: number;
}

/**
 * `stream` with its `write` or `setHandlers` replaced (a test's tap or fault); everything else passes through. Tests
 * wrap the connecting side's stream with it (`TransportOptions.wrapConnectStream`) or a stream before the handshake.
 */
export function overStream(
  stream: ByteStream,
  override: Partial<Pick<ByteStream, 'write' | 'setHandlers'>>,
): ByteStream {
  return {
    get closed() {
      return stream.closed;
    },
    setHandlers: override.setHandlers ?? ((handlers: ByteStreamHandlers) => stream.setHandlers(handlers)),
    write: override.write ?? ((chunks, released) => stream.write(chunks, released)),
    end: () => stream.end(),
    destroy: (error) => stream.destroy(error),
  };
}

/** Wraps a raw stream so its outgoing bytes suffer `plan`. */
export function withByteFaults(stream: ByteStream, plan: ByteFaultPlan): ByteStream {
  let written = 0;
  return overStream(stream, {
    write(chunks) {
      let bytes = concat(chunks);
      const start = written;
      written += bytes.byteLength;
      const corrupt = plan.corruptByteAt;
      if (corrupt !== undefined && corrupt >= start && corrupt < written) bytes[corrupt - start]! ^= 0x5a;
      const cut = plan.cutAfterBytes;
      if (cut !== undefined && written >= cut) {
        bytes = bytes.subarray(0, Math.max(0, cut - start));
        if (bytes.byteLength > 0) stream.write([bytes]);
        stream.end(); // the peer gets every byte up to the cut, then the close
        return false;
      }
      return stream.write([bytes]);
    },
  });
}
