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
   * Each page's checksum, sealed where the KV was computed (before any staging copy). The COMMIT's manifest digest is
   * built from these, so it checks the KV end to end: a page whose bytes changed between the computation and the wire
   * passes its PAGE checksum (which covers only the hop) but fails the digest.
   */
  readonly checksums: readonly bigint[];
  pageView(index: number): Uint8Array;
}
