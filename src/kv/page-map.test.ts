import assert from 'node:assert/strict';
import { test } from 'node:test';
import { makeKvLayout } from './kv-layout.js';
import { PAGE_CELL, PAGE_MAP_CELLS_MAX, pageMapOf } from './page-map.js';
import { sharedOwner } from './page-owner.js';
import { PagePool } from './page-pool.js';
import { newPageTable } from './page-table.js';

const layout = makeKvLayout(1, 2, 4);

function ownerAt(map: ReturnType<typeof pageMapOf>, cell: number): string | undefined {
  const index = map.owners[cell * 2]! + map.owners[cell * 2 + 1]! * 256;
  return index === 0 ? undefined : map.tenants[index - 1];
}

test('each page shows its state and tenant; reading the map changes nothing in the pool', () => {
  const pool = new PagePool(layout, 8);
  const a = newPageTable({ tenant: 'acme', request: 'a' });
  pool.grow(a, 3); // pages 0, 1, 2
  pool.markWritten(a, 6); // page 0 full, page 1 half, page 2 none
  const reserved = pool.reserve({ tenant: 'globex', request: 'b' }, 1); // page 3
  const cache = newPageTable(sharedOwner('acme'));
  pool.grow(cache, 1); // page 4
  const onWire = newPageTable({ tenant: 'globex', request: 'c' });
  pool.grow(onWire, 1); // page 5
  const before = pool.checkConservation();

  const map = pageMapOf(pool, (request) => request === 'c');
  assert.deepEqual(
    [...map.cells],
    [
      PAGE_CELL.written,
      PAGE_CELL.writing,
      PAGE_CELL.reserved,
      PAGE_CELL.reserved,
      PAGE_CELL.cached,
      PAGE_CELL.transferring,
      PAGE_CELL.free,
      PAGE_CELL.free,
    ],
  );
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5, 6].map((cell) => ownerAt(map, cell)),
    ['acme', 'acme', 'acme', 'globex', 'acme', 'globex', undefined],
  );
  assert.deepEqual(map.tenants, ['acme', 'globex']);
  assert.equal(map.pagesPerCell, 1);
  assert.deepEqual(pool.checkConservation(), before);
  assert.equal(pool.freePageCount, 2);

  pool.release(reserved!);
  pool.releaseAll(a);
  assert.deepEqual([...pageMapOf(pool).cells].slice(0, 4), [0, 0, 0, 0], 'released pages show free at once');
});

test('a pool larger than the cell bound shares cells, each showing its most telling page', () => {
  const pages = PAGE_MAP_CELLS_MAX * 2 + 1;
  const pool = new PagePool(makeKvLayout(1, 1, 1), pages);
  const a = newPageTable({ tenant: 'acme', request: 'a' });
  pool.grow(a, 3); // pages 0, 1, 2: cells 0 and 1
  pool.markWritten(a, 1); // page 0 written, pages 1–2 granted only
  const map = pageMapOf(pool);
  assert.equal(map.pagesPerCell, 3);
  assert.equal(map.cells.length, Math.ceil(pages / 3));
  assert.ok(map.cells.length <= PAGE_MAP_CELLS_MAX);
  assert.equal(map.cells[0], PAGE_CELL.written, 'cell 0 (pages 0–2) shows its written page');
  assert.equal(map.cells[1], PAGE_CELL.free);
  assert.equal(ownerAt(map, 0), 'acme');
});
