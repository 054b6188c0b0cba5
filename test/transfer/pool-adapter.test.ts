/** The transfer wired to two real PagePools (prefill → decode): bit-identical values, scrubbed pages on failure. */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { makeKvLayout } from '../../src/kv/kv-layout.js';
import { PagePool } from '../../src/kv/page-pool.js';
import { newPageTable } from '../../src/kv/page-table.js';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { reserveTransferSink, tableTransferSource } from '../../src/transfer/pool-adapter.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { TransferReceiver } from '../../src/transfer/transfer-receiver.js';
import { TransferSender } from '../../src/transfer/transfer-sender.js';
import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { FaultyFrameChannel } from '../helpers/fault-injection.js';
import { FIRST_TOKEN, SECRET } from './harness.js';

const layout = makeKvLayout(2, 8, 4);
let checksum: PageChecksum;
before(async () => {
  checksum = await createPageChecksum();
});

async function run(tokenCount: number, faulty: boolean) {
  const prefill = new PagePool(layout, 8);
  const decode = new PagePool(layout, 8);
  const owner = { tenant: 't1', request: 'r1' };
  const table = newPageTable(owner);
  assert.ok(prefill.grow(table, Math.ceil(tokenCount / layout.pageSize)));
  prefill.markWritten(table, tokenCount);
  for (let i = 0; i < prefill.arena.length; i++) prefill.arena[i] = (i * 40_503 + 1) & 0xffff; // f16 bit patterns of every kind, NaNs too
  const transport = new MemoryTransport({
    secret: SECRET,
    clock: systemClock,
    handshakeTimeoutMs: 1_000,
    network: new MemoryNetwork(),
    highWaterBytes: 1 << 16,
  });
  const receiver = new TransferReceiver({ checksum, clock: systemClock, idleTimeoutMs: 1_000 });
  const listener = await transport.listen('decode', (c) => receiver.accept(c));
  const reserved = reserveTransferSink(decode, owner, tokenCount)!;
  const handle = receiver.expect({
    ...owner,
    epoch: reserved.epoch,
    tokenCount,
    pageSizeTokens: layout.pageSize,
    sink: reserved.sink,
    deadlineMs: 5_000,
  });
  const channel = await transport.connect(listener.address);
  const sender = new TransferSender(
    faulty ? new FaultyFrameChannel(channel, [{ kind: 'corrupt', frame: 2, byteIndex: 200 }]) : channel,
    handle.ticket,
    { clock: systemClock, deadlineMs: 5_000, idleTimeoutMs: 1_000 },
  );
  const sent = sender.send(tableTransferSource(prefill, table, tokenCount, checksum), [FIRST_TOKEN]);
  return { prefill, decode, table, reserved, handle, sent, close: () => listener.close() };
}

test('pages move between two pools bit-identical, and decode may read them after COMMIT', async () => {
  const r = await run(10, false);
  await r.sent;
  assert.equal((await r.handle.outcome).state, 'COMMITTED');
  r.decode.checkReadable(r.reserved.table, 10);
  r.reserved.table.pages.forEach((page, i) => {
    const values = layout.valuesPerPage;
    const got = r.decode.arena.subarray(page * values, (page + 1) * values);
    const want = r.prefill.arena.subarray(r.table.pages[i]! * values, (r.table.pages[i]! + 1) * values);
    assert.deepEqual(
      new Uint8Array(got.buffer, got.byteOffset, got.byteLength),
      new Uint8Array(want.buffer, want.byteOffset, want.byteLength),
    );
  });
  r.decode.release(r.reserved.reservation);
  assert.equal(r.decode.freePageCount, 8);
  await r.close();
});

test('a failed transfer leaves the decode pool full and zeroed', async () => {
  const r = await run(10, true);
  await assert.rejects(r.sent, TransferError);
  const outcome = await r.handle.outcome;
  assert.ok(outcome.state === 'FAILED' && outcome.error.reason === 'checksum_mismatch');
  assert.equal(r.decode.freePageCount, 8);
  assert.ok(r.decode.arena.every((v) => v === 0));
  r.decode.checkConservation();
  await r.close();
});
