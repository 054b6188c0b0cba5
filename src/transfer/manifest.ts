/**
 * The manifest digest a COMMIT carries: SHA-256 over the binding and every page's (index, tokenCount, checksum) in
 * order. The sender builds it from the checksums sealed where prefill computed the KV (KvPageSource.checksums), which
 * its PAGEs carried, the receiver from the PAGE checksums it accepted (each checked against the bytes as they landed
 * in its pool). Equal digests mean the receiver accepted, in order, every page the sender sealed, with the token
 * counts the ticket gives. The input is ~20 bytes a page, so a cryptographic hash costs nothing here.
 */
import { createHash } from 'node:crypto';
import { utf8Bytes } from '../util/byte-cursor.js';
import type { TransferBinding } from './ticket.js';

export const DIGEST_BYTES = 32;

export interface ManifestEntry {
  readonly index: number;
  readonly tokenCount: number;
  readonly checksum: bigint;
}

export function manifestDigest(binding: TransferBinding, entries: readonly ManifestEntry[]): Uint8Array {
  const hash = createHash('sha256');
  const field = (bytes: Uint8Array) => {
    const length = new Uint8Array(4);
    new DataView(length.buffer).setUint32(0, bytes.byteLength, true);
    hash.update(length).update(bytes);
  };
  field(utf8Bytes('kvfence/transfer/manifest/v1'));
  field(utf8Bytes(binding.request));
  field(utf8Bytes(binding.tenant));
  field(binding.nonce);
  const entry = new DataView(new ArrayBuffer(16));
  for (const e of entries) {
    entry.setUint32(0, e.index, true);
    entry.setUint32(4, e.tokenCount, true);
    entry.setBigUint64(8, e.checksum, true);
    hash.update(new Uint8Array(entry.buffer));
  }
  return new Uint8Array(hash.digest());
}
