import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PAGE_MAP_CELLS_MAX, type PageMapReport } from '../kv/page-map.js';
import { KvfenceError } from '../util/errors.js';
import { decodeControl, encodeControl } from './control-protocol.js';

const report: PageMapReport = {
  map: {
    pageCount: 4,
    pagesPerCell: 1,
    cells: new Uint8Array([0, 3, 5, 4]),
    owners: new Uint8Array([0, 0, 1, 0, 2, 0, 1, 0]),
    tenants: ['acme', 'globex'],
  },
  transfers: [{ request: 'cmpl-1', tenant: 'globex', pages: 3, pagesDone: 1 }],
};

/** The report as JSON on the wire, changed by `edit` (as a faulty or hostile worker could send it). */
function wire(edit: (r: Record<string, unknown> & { map: Record<string, unknown> }) => void): Uint8Array {
  const json = JSON.parse(Buffer.from(encodeControl({ type: 'page_map', id: 7, report })).toString('utf8'));
  edit(json.report);
  return new Uint8Array(Buffer.from(JSON.stringify(json)));
}

const b64 = (bytes: number[]) => ({ base64: Buffer.from(bytes).toString('base64') });
const refused = (field: RegExp) => (e: unknown) => e instanceof KvfenceError && field.test(e.message);

test('page_map: the question and the answer survive a round trip', () => {
  assert.deepEqual(decodeControl(encodeControl({ type: 'page_map', id: 3 })), { type: 'page_map', id: 3 });
  assert.deepEqual(decodeControl(encodeControl({ type: 'page_map', id: 7, report })), {
    type: 'page_map',
    id: 7,
    report,
  });
});

test('page_map: every size, state, tenant index and progress is checked', () => {
  assert.throws(() => decodeControl(wire((r) => (r.map['cells'] = b64([0, 3, 6, 4])))), refused(/unknown state/));
  assert.throws(
    () => decodeControl(wire((r) => (r.map['owners'] = b64([0, 0, 3, 0, 0, 0, 0, 0])))),
    refused(/not in the table/),
  );
  assert.throws(() => decodeControl(wire((r) => (r.map['cells'] = b64([0, 3, 5])))), refused(/cover the pages/));
  assert.throws(() => decodeControl(wire((r) => (r.map['owners'] = b64([0, 0])))), refused(/two bytes per cell/));
  assert.throws(
    () =>
      decodeControl(
        wire((r) => {
          r.map['pageCount'] = PAGE_MAP_CELLS_MAX + 1;
          r.map['cells'] = b64(new Array<number>(PAGE_MAP_CELLS_MAX + 1).fill(0));
          r.map['owners'] = b64(new Array<number>(2 * (PAGE_MAP_CELLS_MAX + 1)).fill(0));
        }),
      ),
    refused(/cells/),
  );
  assert.throws(
    () => decodeControl(wire((r) => (r['transfers'] = [{ request: 'x', tenant: 'y', pages: 2, pagesDone: 3 }]))),
    refused(/pagesDone/),
  );
  assert.throws(() => decodeControl(wire((r) => (r.map['tenants'] = [1, 2]))), refused(/tenant/));
});
