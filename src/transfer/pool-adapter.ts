/**
 * The thin layer between the transfer and src/kv/page-pool.ts (its API as of this writing: reserve → acquire →
 * release, markWritten on a PageTable, checkReadable). A page is `layout.bytesPerPage` bytes (f16 values), contiguous in the
 * arena, so its bytes travel as one view; both ends are little-endian (x86-64, arm64), so bytes are bit-identical.
 *
 * Decode side: `reserveTransferSink` reserves and acquires the pages (they must be active for markWritten) and returns
 * the sink the TransferReceiver writes into, plus the table decode reads through once the transfer is COMMITTED.
 * Nothing is scheduled on the table before COMMITTED; on any other end the sink releases (scrubs) the reservation.
 */

import { pagesForTokens } from '../kv/kv-layout.js';
import type { PageOwner } from '../kv/page-owner.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import { assert } from '../util/assert.js';
import type { KvPageSink, KvPageSource } from './kv-page-port.js';
import type { PageChecksum } from './page-checksum.js';

function pageBytesView(pool: PagePool, page: number): Uint8Array {
  const bytes = pool.layout.bytesPerPage;
  assert(Number.isInteger(page) && page >= 0 && page < pool.pageCount, `page ${page} out of the pool`);
  return new Uint8Array(pool.arena.buffer, pool.arena.byteOffset + page * bytes, bytes);
}

export interface TransferReservation {
  readonly sink: KvPageSink;
  readonly reservation: PageReservation;
  /** decode reads through this after COMMITTED */
  readonly table: PageTable;
  /** the ticket epoch: the pool's reservation serial, unique for the pool's lifetime (mod 2^32) */
  readonly epoch: number;
}

/** Reserves the pages `tokenCount` tokens need; undefined when the pool has too few free (the caller queues or 503s). */
export function reserveTransferSink(
  pool: PagePool,
  owner: PageOwner,
  tokenCount: number,
): TransferReservation | undefined {
  const pageCount = pagesForTokens(pool.layout, tokenCount);
  const reservation = pool.reserve(owner, pageCount);
  if (reservation === undefined) return undefined;
  const epoch = pool.reservationCount >>> 0;
  const table = pool.acquire(reservation);
  const { pageSize } = pool.layout;
  const sink: KvPageSink = {
    pageCount,
    pageBytes: pool.layout.bytesPerPage,
    isOpen: () => reservation.state !== 'released',
    pageView: (index) => {
      assert(reservation.state === 'acquired', 'writes go only into a live reservation');
      assert(Number.isInteger(index) && index >= 0 && index < pageCount, `page index ${index} of ${pageCount}`);
      return pageBytesView(pool, table.pages[index]!);
    },
    markPageWritten: (index, tokens) => {
      // pages arrive in order, so the table's written count grows page by page
      assert(table.writtenTokens === index * pageSize, `page ${index} written out of order`);
      pool.markWritten(table, index * pageSize + tokens);
    },
    scrubAndRelease: () => pool.release(reservation),
  };
  return { sink, reservation, table, epoch };
}

/**
 * Prefill side: the computed pages of a table, as the TransferSender reads them. Checks I3 once, up front, and seals
 * every page's checksum right there: the pages are this request's, complete, and unchanged until it releases them, so
 * these are the checksums of the KV exactly as prefill computed it, which each PAGE carries and the receiver checks
 * the page as it stores it against (kv-page-port.ts).
 */
export function tableTransferSource(
  pool: PagePool,
  table: PageTable,
  tokenCount: number,
  checksum: PageChecksum,
): KvPageSource {
  pool.checkReadable(table, tokenCount);
  const pageCount = pagesForTokens(pool.layout, tokenCount);
  const pageView = (index: number) => {
    assert(Number.isInteger(index) && index >= 0 && index < pageCount, `page index ${index} of ${pageCount}`);
    return pageBytesView(pool, table.pages[index]!);
  };
  const checksums = Array.from({ length: pageCount }, (_, index) => checksum.of(pageView(index)));
  return { pageCount, pageBytes: pool.layout.bytesPerPage, checksums, pageView };
}
