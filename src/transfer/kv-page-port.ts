/**
 * What the transfer layer needs from a KV page pool, and nothing more: the pages of one reservation as byte views.
 * pool-adapter.ts implements these over src/kv/page-pool.ts; tests implement them over plain arrays.
 */

/** Decode side: one reservation's pages, written by the TransferReceiver. */
export interface KvPageSink {
  readonly pageCount: number;
  readonly pageBytes: number;
  /** false once the reservation is closed (released, cancelled, expired): nothing may be written into it any more */
  isOpen(): boolean;
  /** a writable view of page `index` (0 ≤ index < pageCount) of this reservation, straight into the arena */
  pageView(index: number): Uint8Array;
  /** records that page `index` now holds `tokenCount` written tokens */
  markPageWritten(index: number, tokenCount: number): void;
  /** fail path: zero every page, bump epochs, give the pages back. Idempotent. */
  scrubAndRelease(): void;
}

/** Prefill side: one request's computed pages, read by the TransferSender. Views must not change until it settles. */
export interface KvPageSource {
  readonly pageCount: number;
  readonly pageBytes: number;
  /**
   * Each page's checksum, sealed where the KV was computed (before any staging copy). Each PAGE carries its page's, and
   * the COMMIT's manifest digest is built from them, so the receiver checks the KV end to end: a page whose bytes
   * changed anywhere between the computation and the decode pool fails its PAGE check.
   */
  readonly checksums: readonly bigint[];
  pageView(index: number): Uint8Array;
}
