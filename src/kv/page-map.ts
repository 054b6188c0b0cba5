/**
 * A compact picture of a pool for the operator's dashboard (/dashboard): one state byte per cell and a tenant index per
 * cell into a table of tenant names — never a page's contents, a token or a request's text. A pool of more pages than
 * PAGE_MAP_CELLS_MAX is drawn with several pages per cell, each cell showing its most telling page (order below), so
 * the picture, the control message that carries it and the browser's work stay bounded whatever the pool.
 *
 * States, as the dashboard names them (the pool's own states are free, reserved, active):
 *   free          not granted
 *   reserved      granted, nothing written yet (reserved, or active with no token written)
 *   writing       active, partly written (a prompt chunk or decode under way)
 *   written       active, every slot written
 *   cached        a tenant's prefix-cache page (owner `shared`)
 *   transferring  a page of a request whose KV is on the wire (the worker says which requests)
 */
import { assert } from '../util/assert.js';
import type { PagePool } from './page-pool.js';

export const PAGE_CELL = { free: 0, reserved: 1, writing: 2, written: 3, cached: 4, transferring: 5 } as const;
export type PageCellState = (typeof PAGE_CELL)[keyof typeof PAGE_CELL];
export const PAGE_CELL_STATES = 6;

/** cells of one pool's picture at most: 16 Ki cells are 48 KiB on the wire, and a canvas draws them at once */
export const PAGE_MAP_CELLS_MAX = 16_384;
/** transfers listed per worker at most (the rest are still drawn as transferring pages) */
export const PAGE_MAP_TRANSFERS_MAX = 256;

/** which page of a cell the cell shows: the higher, the more it tells */
const SHOWN_FIRST: readonly number[] = [0, 2, 4, 3, 1, 5]; // by state code: free, reserved, writing, written, cached, transferring

export interface PageMap {
  pageCount: number;
  pagesPerCell: number;
  /** one PageCellState per cell */
  cells: Uint8Array;
  /** two bytes per cell, little-endian: 0 = nobody, i = tenants[i - 1] */
  owners: Uint8Array;
  tenants: string[];
}

/** A transfer the worker holds, by pages: how far its KV has come. */
export interface TransferProgress {
  request: string;
  tenant: string;
  pages: number;
  pagesDone: number;
}

/** A worker's page map for the dashboard: its pool's picture and the transfers it holds, with their progress. */
export interface PageMapReport {
  map: PageMap;
  transfers: TransferProgress[];
}

/** The picture of `pool`; `transferring(request)` says whether a request's written pages are on the wire. */
export function pageMapOf(pool: PagePool, transferring: (request: string) => boolean = () => false): PageMap {
  const pagesPerCell = Math.ceil(pool.pageCount / PAGE_MAP_CELLS_MAX);
  const cellCount = Math.ceil(pool.pageCount / pagesPerCell);
  const cells = new Uint8Array(cellCount);
  const owners = new Uint8Array(cellCount * 2);
  const cellTenants: (string | undefined)[] = new Array<string | undefined>(cellCount).fill(undefined);
  const pageSize = pool.layout.pageSize;
  pool.visitPages((page, state, owner, written) => {
    let code: PageCellState = PAGE_CELL.free;
    if (owner?.shared === true) code = PAGE_CELL.cached;
    else if (state === 'active' && transferring(owner!.request)) code = PAGE_CELL.transferring;
    else if (state === 'active' && written === pageSize) code = PAGE_CELL.written;
    else if (state === 'active' && written > 0) code = PAGE_CELL.writing;
    else if (state !== 'free') code = PAGE_CELL.reserved;
    const cell = Math.floor(page / pagesPerCell);
    if (page % pagesPerCell !== 0 && SHOWN_FIRST[code]! <= SHOWN_FIRST[cells[cell]!]!) return;
    cells[cell] = code;
    cellTenants[cell] = owner?.tenant;
  });
  // the table names only the tenants a cell shows, so it is never longer than the cells
  const tenants: string[] = [];
  const tenantIndex = new Map<string, number>();
  cellTenants.forEach((tenant, cell) => {
    if (tenant === undefined) return;
    let index = tenantIndex.get(tenant);
    if (index === undefined) {
      index = tenants.push(tenant);
      tenantIndex.set(tenant, index);
    }
    owners[cell * 2] = index & 0xff;
    owners[cell * 2 + 1] = index >> 8;
  });
  assert(tenants.length <= cellCount && cellCount <= PAGE_MAP_CELLS_MAX, 'a page map stays within its bounds');
  return { pageCount: pool.pageCount, pagesPerCell, cells, owners, tenants };
}
