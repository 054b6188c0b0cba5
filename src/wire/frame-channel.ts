/**
 * An authenticated, message-oriented connection between two workers: what the sender and the receiver talk through.
 * secure-channel.ts implements it over any ByteStream; fault-injection.ts wraps it for tests.
 */
import type { TransferError } from '../transfer/transfer-error.js';

export interface FrameChannelHandlers {
  /** one whole frame; the bytes are valid only during the call (copy what you keep) */
  frame(bytes: Uint8Array): void;
  /** exactly once; undefined when the peer ended cleanly at a frame boundary */
  close(error: TransferError | undefined): void;
}

export interface FrameChannel {
  /**
   * Queues one frame, the concatenation of `parts`, taking what it needs from them before it returns: the caller may
   * change or free them then (the prefill worker releases the pages it sent). False: above the high-water mark, await
   * `drained`.
   */
  send(parts: readonly Uint8Array[]): boolean;
  /** resolves when writable again; rejects (backpressure_timeout, connection_closed) otherwise */
  drained(timeoutMs: number): Promise<void>;
  setHandlers(handlers: FrameChannelHandlers): void;
  /**
   * The longest frame the peer may send from now on: a longer one fails the channel (frame_too_large) at its length
   * prefix, before any of it is buffered or deciphered. LIMITS.transferFrameBytesMax until an owner says less.
   */
  limitFrames(bytes: number): void;
  /** closes after queued frames are delivered */
  end(): void;
  destroy(error?: TransferError): void;
  readonly closed: boolean;
}
