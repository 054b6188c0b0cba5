/**
 * Test doubles and a small world for transfer tests: a page pool over a byte arena that records every write and
 * checks it against the reservation it went to, page sources of random bytes, and a decode worker (receiver +
 * listener) with prefill workers (senders) on any transport.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { KvPageSink, KvPageSource } from '../../src/transfer/kv-page-port.js';
import type { PageChecksum } from '../../src/transfer/page-checksum.js';
import type { TransferOutcome } from '../../src/transfer/receive-session.js';
import type { TransferTicket } from '../../src/transfer/ticket.js';
import {
  type TransferHandle,
  TransferReceiver,
  type TransferReceiverOptions,
} from '../../src/transfer/transfer-receiver.js';
import { type SendResult, TransferSender } from '../../src/transfer/transfer-sender.js';
import type { FirstToken } from '../../src/transfer/wire-format.js';
import type { Clock } from '../../src/util/clock.js';
import { systemClock } from '../../src/util/clock.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import type { TransferListener, TransferTransport } from '../../src/wire/transport.js';

export const SECRET = new Uint8Array(randomBytes(32));
export const PAGE_SIZE_TOKENS = 4;

/** A pool of `pageCount` pages of `pageBytes` bytes; every write is checked against the live reservation. */
export class TestPool {
  readonly arena: Uint8Array; // (pageCount, pageBytes)
  readonly holder: (TestSink | undefined)[];
  readonly violations: string[] = [];
  private nextId = 1;

  constructor(
    readonly pageCount: number,
    readonly pageBytes: number,
  ) {
    this.arena = new Uint8Array(pageCount * pageBytes);
    this.holder = new Array<TestSink | undefined>(pageCount).fill(undefined);
  }

  get freeCount(): number {
    return this.holder.filter((h) => h === undefined).length;
  }

  reserve(count: number): TestSink {
    const pages: number[] = [];
    for (let p = 0; p < this.pageCount && pages.length < count; p++) if (this.holder[p] === undefined) pages.push(p);
    assert.equal(pages.length, count, 'test pool too small');
    const sink = new TestSink(this, this.nextId++, pages);
    for (const p of pages) this.holder[p] = sink;
    return sink;
  }

  page(p: number): Uint8Array {
    return this.arena.subarray(p * this.pageBytes, (p + 1) * this.pageBytes);
  }

  /** every free page is all zeros and nobody wrote out of turn */
  checkClean(): void {
    assert.deepEqual(this.violations, []);
    for (let p = 0; p < this.pageCount; p++) {
      if (this.holder[p] === undefined)
        assert.ok(
          this.page(p).every((b) => b === 0),
          `free page ${p} was scrubbed`,
        );
    }
  }
}

export class TestSink implements KvPageSink {
  readonly pageBytes: number;
  /** page indexes written, in order */
  readonly writes: number[] = [];
  readonly writtenTokens: number[];
  private open = true;
  released = false;

  constructor(
    private readonly pool: TestPool,
    readonly id: number,
    readonly pages: readonly number[],
  ) {
    this.pageBytes = pool.pageBytes;
    this.writtenTokens = pages.map(() => 0);
  }

  get pageCount(): number {
    return this.pages.length;
  }

  isOpen(): boolean {
    return this.open;
  }

  pageView(index: number): Uint8Array {
    if (!this.open) this.pool.violations.push(`reservation ${this.id}: view of page ${index} after close`);
    const page = this.pages[index];
    assert.ok(page !== undefined, `page index ${index} out of the reservation`);
    if (this.pool.holder[page] !== this) this.pool.violations.push(`reservation ${this.id}: page ${page} not held`);
    return this.pool.page(page);
  }

  markPageWritten(index: number, tokenCount: number): void {
    if (!this.open) this.pool.violations.push(`reservation ${this.id}: write of page ${index} after close`);
    this.writes.push(index);
    this.writtenTokens[index] = tokenCount;
  }

  scrubAndRelease(): void {
    if (!this.open) return;
    this.close();
  }

  /** the decode side's own end (after decoding, or in tests after checking the bytes) */
  close(): void {
    this.open = false;
    this.released = true;
    for (const p of this.pages) {
      this.pool.page(p).fill(0);
      this.pool.holder[p] = undefined;
    }
  }

  bytes(): Uint8Array {
    return new Uint8Array(Buffer.concat(this.pages.map((p) => this.pool.page(p))));
  }
}

/** Random pages, their checksums sealed up front (as prefill seals them where it computed the KV). */
export function randomSource(
  pageCount: number,
  pageBytes: number,
  checksum: PageChecksum,
): KvPageSource & { all: Uint8Array } {
  const all = new Uint8Array(randomBytes(pageCount * pageBytes));
  const pageView = (i: number) => all.subarray(i * pageBytes, (i + 1) * pageBytes);
  const checksums = Array.from({ length: pageCount }, (_, i) => checksum.of(pageView(i)));
  return { pageCount, pageBytes, all, checksums, pageView };
}

/** A one-page ticket of `request` (tenant-a, 4 tokens) with a fresh nonce: for tests that need no reservation */
export function onePageTicket(request: string, pageBytes: number): TransferTicket {
  return {
    request,
    tenant: 'tenant-a',
    nonce: new Uint8Array(randomBytes(16)),
    epoch: 1,
    pageCount: 1,
    tokenCount: PAGE_SIZE_TOKENS,
    pageSizeTokens: PAGE_SIZE_TOKENS,
    pageBytes,
  };
}

export const FIRST_TOKEN: FirstToken = {
  id: 42,
  logprob: -0.125,
  top: [
    { id: 42, logprob: -0.125 },
    { id: 7, logprob: -2.5 },
  ],
};

export interface World {
  readonly receiver: TransferReceiver;
  readonly pool: TestPool;
  readonly listener: TransferListener;
  readonly transport: TransferTransport;
  close(): Promise<void>;
}

export async function makeWorld(
  transport: TransferTransport,
  checksum: PageChecksum,
  options: {
    pageCount?: number;
    pageBytes?: number;
    idleTimeoutMs?: number;
    clock?: Clock;
    address?: string;
    /** the receiver class (the mutation self-test's has a check removed) */
    Receiver?: new (
      options: TransferReceiverOptions,
    ) => TransferReceiver;
  } = {},
): Promise<World> {
  const Receiver = options.Receiver ?? TransferReceiver;
  const receiver = new Receiver({
    checksum,
    clock: options.clock ?? systemClock,
    idleTimeoutMs: options.idleTimeoutMs ?? 2_000,
  });
  const pool = new TestPool(options.pageCount ?? 64, options.pageBytes ?? 4096);
  const listener = await transport.listen(options.address ?? 'decode-0', (channel) => receiver.accept(channel));
  return {
    receiver,
    pool,
    listener,
    transport,
    close: async () => {
      receiver.close();
      await listener.close();
    },
  };
}

export interface Transfer {
  readonly handle: TransferHandle;
  readonly sink: TestSink;
  readonly source: KvPageSource & { all: Uint8Array };
  readonly sent: Promise<SendResult>;
  readonly outcome: Promise<TransferOutcome>;
}

/** The decode side alone: reserves the pages `tokenCount` tokens need and expects their transfer. */
export function expectTransfer(
  world: World,
  request: string,
  tokenCount: number,
  options: { deadlineMs?: number; tenant?: string } = {},
): { sink: TestSink; handle: TransferHandle } {
  const sink = world.pool.reserve(Math.ceil(tokenCount / PAGE_SIZE_TOKENS));
  const handle = world.receiver.expect({
    request,
    tenant: options.tenant ?? 'tenant-a',
    epoch: sink.id,
    tokenCount,
    pageSizeTokens: PAGE_SIZE_TOKENS,
    sink,
    deadlineMs: options.deadlineMs ?? 10_000,
  });
  return { sink, handle };
}

/** Reserves on the decode side, then connects and pushes from a prefill side through `wrap` (faults, recording). */
export function startTransfer(
  world: World,
  checksum: PageChecksum,
  request: string,
  tokenCount: number,
  wrap: (channel: FrameChannel) => FrameChannel = (c) => c,
  options: {
    deadlineMs?: number;
    tenant?: string;
    transport?: TransferTransport;
    /** the prefill side's pages (default: random ones, randomSource) */
    source?: (pageCount: number, pageBytes: number) => KvPageSource & { all: Uint8Array };
  } = {},
): Transfer {
  const pageCount = Math.ceil(tokenCount / PAGE_SIZE_TOKENS);
  const { sink, handle } = expectTransfer(world, request, tokenCount, options);
  const source = (options.source ?? ((n, b) => randomSource(n, b, checksum)))(pageCount, world.pool.pageBytes);
  const sent = (options.transport ?? world.transport).connect(world.listener.address).then((channel) => {
    const sender = new TransferSender(wrap(channel), handle.ticket, {
      clock: systemClock,
      deadlineMs: options.deadlineMs ?? 10_000,
      idleTimeoutMs: 2_000,
    });
    return sender.send(source, [FIRST_TOKEN]);
  });
  sent.catch(() => {}); // awaited by the test; this keeps an early rejection from being "unhandled"
  return { handle, sink, source, sent, outcome: handle.outcome };
}

/** Waits until `check()` holds, polling; fails naming `what` after `timeoutMs`. */
export async function until(what: string, check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    assert.ok(Date.now() - start < timeoutMs, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** The next `count` frames of `channel` (copies), in order; rejects if it closes first. Sets the channel's handlers. */
export function receiveFrames(channel: FrameChannel, count: number): Promise<Uint8Array[]> {
  const frames: Uint8Array[] = [];
  return new Promise((resolve, reject) =>
    channel.setHandlers({
      frame: (bytes) => {
        frames.push(bytes.slice());
        if (frames.length === count) resolve(frames);
      },
      close: (error) => reject(error ?? new Error('closed early')),
    }),
  );
}
