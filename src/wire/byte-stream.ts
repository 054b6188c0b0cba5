/**
 * The one thing a transport provides: an ordered, reliable, bidirectional byte stream with backpressure (a TCP socket,
 * an in-memory pipe). Everything above it — authentication, framing, MACs, the transfer protocol — is shared.
 */
export interface ByteStreamHandlers {
  /** the next bytes, lent for this call only: the stream may reuse their memory after it returns (copy what you keep) */
  data(bytes: Uint8Array): void;
  /** writable again after `write` returned false */
  drain(): void;
  /** exactly once; an error when the stream broke rather than ended */
  close(error: Error | undefined): void;
}

export interface ByteStream {
  /**
   * queues the chunks in order; false: the peer is behind, wait for `drain` before writing more. `released`, when
   * given, is called once the stream holds none of the chunks' bytes any more, so the writer may reuse their memory;
   * not when the stream breaks (a stream may also simply never call it: the writer then allocates afresh)
   */
  write(chunks: readonly Uint8Array[], released?: () => void): boolean;
  /** closes after everything queued was delivered */
  end(): void;
  /** closes now; whatever is queued is dropped */
  destroy(error?: Error): void;
  readonly closed: boolean;
  /** hands the stream to an owner (the handshake, then the secure channel); data that arrives before is held */
  setHandlers(handlers: ByteStreamHandlers): void;
}
