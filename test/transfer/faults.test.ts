/**
 * One test per fault, on each transport: the faulted transfer fails with kv_transfer_failed and the expected reason,
 * nothing was written after the failure point, every reserved page was scrubbed and released, and a clean transfer
 * running at the same time on the same receiver still arrives byte-identical.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError, type TransferFailureReason } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import type { TransferTransport, TransportOptions } from '../../src/wire/transport.js';
import { type ByteFaultPlan, FaultyFrameChannel, type FrameFault, withByteFaults } from '../helpers/fault-injection.js';
import { makeWorld, SECRET, startTransfer } from './harness.js';

const IDLE_MS = 300;
const PAGE_BYTES = 4096;
// the faulted transfer: 6 pages, frames 0 = HELLO, 1..6 = PAGE 0..5, 7 = COMMIT; faults hit frame 3 = PAGE 2
const FAULTED_TOKENS = 24;
// where page 2's sealed frame sits in the initiator's byte stream: handshake (38 + 37), HELLO (~90), 2 pages (~4180 each)
const MID_PAGE_2 = 75 + 90 + 2 * 4180 + 2000;

let checksum: PageChecksum;
let replayed: Uint8Array[] = [];

interface Case {
  name: string;
  frameFault?: FrameFault | ((recorded: Uint8Array[]) => FrameFault);
  byteFault?: ByteFaultPlan;
  deadlineMs?: number;
  reason: TransferFailureReason;
  state: 'FAILED' | 'EXPIRED';
  /** pages written before the failure */
  written: number;
}

const CASES: Case[] = [
  {
    name: 'dropped page',
    frameFault: { kind: 'drop', frame: 3 },
    reason: 'page_out_of_order',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'one corrupt byte',
    frameFault: { kind: 'corrupt', frame: 3, byteIndex: 4000 },
    reason: 'checksum_mismatch',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'truncated frame',
    frameFault: { kind: 'truncate', frame: 3, keepBytes: 100 },
    reason: 'frame_truncated',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'duplicated page',
    frameFault: { kind: 'duplicate', frame: 3 },
    reason: 'page_duplicate',
    state: 'FAILED',
    written: 3,
  },
  {
    name: 'reordered pages',
    frameFault: { kind: 'reorder', frame: 3 },
    reason: 'page_out_of_order',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'delay past the idle timeout',
    frameFault: { kind: 'delay', frame: 3, delayMs: 3 * IDLE_MS },
    reason: 'idle_timeout',
    state: 'EXPIRED',
    written: 2,
  },
  {
    name: 'stalled sender',
    frameFault: { kind: 'stall', frame: 3 },
    reason: 'idle_timeout',
    state: 'EXPIRED',
    written: 2,
  },
  {
    name: 'late: past the transfer deadline',
    frameFault: { kind: 'delay', frame: 3, delayMs: 250 },
    deadlineMs: 150,
    reason: 'deadline_exceeded',
    state: 'EXPIRED',
    written: 2,
  },
  {
    name: 'closed before COMMIT',
    frameFault: { kind: 'close', frame: 3 },
    reason: 'connection_closed',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'closed mid-frame',
    byteFault: { cutAfterBytes: MID_PAGE_2 },
    reason: 'frame_truncated',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'wrong nonce in HELLO',
    frameFault: { kind: 'wrong_nonce', frame: 0 },
    reason: 'wrong_nonce',
    state: 'FAILED',
    written: 0,
  },
  {
    name: 'wrong nonce',
    frameFault: { kind: 'wrong_nonce', frame: 3 },
    reason: 'wrong_nonce',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'wrong tenant',
    frameFault: { kind: 'wrong_tenant', frame: 3 },
    reason: 'wrong_tenant',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'wrong request id',
    frameFault: { kind: 'wrong_request', frame: 3 },
    reason: 'wrong_request',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'COMMIT with a wrong request id',
    frameFault: { kind: 'wrong_request', frame: 7 },
    reason: 'wrong_request',
    state: 'FAILED',
    written: 6,
  },
  {
    name: 'frame replayed from another request',
    frameFault: (recorded) => ({ kind: 'replay', frame: 3, recorded: [recorded[2]!] }),
    reason: 'wrong_request',
    state: 'FAILED',
    written: 2,
  },
  {
    name: 'tampered wire byte (MAC)',
    byteFault: { corruptByteAt: MID_PAGE_2 },
    reason: 'mac_invalid',
    state: 'FAILED',
    written: 2,
  },
];

type Make = (options: Pick<TransportOptions, 'wrapConnectStream'>) => TransferTransport;

function transports(): { name: string; make: Make; address: string }[] {
  const network = new MemoryNetwork();
  const common = { secret: SECRET, clock: systemClock, handshakeTimeoutMs: 2_000 };
  return [
    {
      name: 'memory',
      make: (o) => new MemoryTransport({ ...common, ...o, network, highWaterBytes: 1 << 20 }),
      address: 'decode-faults',
    },
    { name: 'tcp', make: (o) => new TcpTransport({ ...common, ...o }), address: '127.0.0.1:0' },
  ];
}

before(async () => {
  checksum = await createPageChecksum();
});

for (const kind of transports()) {
  for (const c of CASES) {
    test(`${kind.name}: ${c.name} fails closed (${c.reason}), a concurrent clean transfer is intact`, async () => {
      const clean = kind.make({});
      const world = await makeWorld(clean, checksum, {
        idleTimeoutMs: IDLE_MS,
        pageBytes: PAGE_BYTES,
        address: kind.address,
      });
      if (replayed.length === 0) {
        // frames of another, finished request: what a replay would resend
        let recorder: FaultyFrameChannel | undefined;
        const other = startTransfer(world, checksum, 'req-other', 12, (ch) => {
          recorder = new FaultyFrameChannel(ch, []);
          return recorder;
        });
        await other.sent;
        other.sink.close();
        replayed = recorder!.record;
      }
      const faulty =
        c.byteFault === undefined ? clean : kind.make({ wrapConnectStream: (s) => withByteFaults(s, c.byteFault!) });
      const fault = typeof c.frameFault === 'function' ? c.frameFault(replayed) : c.frameFault;
      const cleanTransfer = startTransfer(world, checksum, 'req-clean', 40);
      const bad = startTransfer(
        world,
        checksum,
        'req-faulted',
        FAULTED_TOKENS,
        (ch) => (fault === undefined ? ch : new FaultyFrameChannel(ch, [fault])),
        { transport: faulty, ...(c.deadlineMs === undefined ? {} : { deadlineMs: c.deadlineMs }) },
      );
      await assert.rejects(bad.sent, TransferError, 'the sender learns of the failure');
      const outcome = await bad.outcome;
      assert.equal(outcome.state, c.state);
      assert.equal(outcome.error.code, 'kv_transfer_failed');
      assert.equal(outcome.error.reason, c.reason, outcome.error.message);
      assert.deepEqual(bad.sink.writes, [...Array(c.written).keys()], 'no write after the failure point');
      assert.ok(bad.sink.released, 'the faulted reservation was scrubbed and released');
      await cleanTransfer.sent;
      assert.equal((await cleanTransfer.outcome).state, 'COMMITTED');
      assert.deepEqual(cleanTransfer.sink.bytes(), cleanTransfer.source.all);
      cleanTransfer.sink.close();
      world.pool.checkClean();
      assert.equal(world.pool.freeCount, world.pool.pageCount);
      assert.equal(world.receiver.liveCount, 0);
      await world.close();
    });
  }
}
