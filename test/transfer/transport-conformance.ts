/**
 * One conformance suite for every transport (hono-style): each transport's test file is a few lines that call
 * `transportConformance` with a factory. Covers framing, order, backpressure, close, authentication, and whole
 * KV transfers.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { before, test } from 'node:test';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import type { TransferTransport, TransportOptions } from '../../src/wire/transport.js';
import { FIRST_TOKEN, makeWorld, SECRET, startTransfer, until } from './harness.js';

export interface TransportFactory {
  /** a transport of this kind; every transport made by one factory reaches the same listeners */
  make(options: Omit<TransportOptions, 'clock' | 'handshakeTimeoutMs'>): TransferTransport;
  /** where to listen */
  address: string;
}

function collect(channel: FrameChannel): { frames: Uint8Array[]; closed: Promise<TransferError | undefined> } {
  const frames: Uint8Array[] = [];
  let done: (e: TransferError | undefined) => void = () => {};
  const closed = new Promise<TransferError | undefined>((resolve) => {
    done = resolve;
  });
  channel.setHandlers({ frame: (b) => frames.push(new Uint8Array(b)), close: (e) => done(e) });
  return { frames, closed };
}

export function transportConformance(name: string, factory: TransportFactory): void {
  let checksum: PageChecksum;
  before(async () => {
    checksum = await createPageChecksum();
  });

  async function pair(): Promise<{ client: FrameChannel; server: FrameChannel; close: () => Promise<void> }> {
    const transport = factory.make({ secret: SECRET });
    let server: FrameChannel | undefined;
    const listener = await transport.listen(factory.address, (c) => {
      server = c;
    });
    const client = await transport.connect(listener.address);
    await until('the server channel', () => server !== undefined);
    return { client, server: server!, close: () => listener.close() };
  }

  test(`${name}: frames arrive whole and in order, both ways`, async () => {
    const { client, server, close } = await pair();
    server.setHandlers({ frame: (b) => server.send([b.slice()]), close: () => {} });
    const got = collect(client);
    const sent = [1, 2, 100, 65_536, 1 << 20, 3].map((n) => new Uint8Array(randomBytes(n)));
    for (const f of sent) client.send([f.subarray(0, 1), f.subarray(1)]);
    await until('echoes', () => got.frames.length === sent.length);
    assert.deepEqual(got.frames, sent);
    client.end();
    assert.equal(await got.closed, undefined);
    await close();
  });

  test(`${name}: send reports backpressure and drained() resolves once the peer reads`, async () => {
    const { client, server, close } = await pair();
    const got = collect(server);
    const frame = new Uint8Array(1 << 20);
    let full = 0;
    for (let i = 0; i < 48; i++) {
      if (!client.send([frame])) {
        full++;
        await client.drained(5_000);
      }
    }
    await until('all frames', () => got.frames.length === 48);
    assert.ok(full > 0, 'the transport applied backpressure at least once');
    client.destroy();
    await got.closed;
    await close();
  });

  test(`${name}: end() closes the peer cleanly after the last frame; destroy() is seen as a close`, async () => {
    const a = await pair();
    const got = collect(a.server);
    for (let i = 0; i < 3; i++) a.client.send([new Uint8Array([i])]);
    a.client.end();
    assert.equal(await got.closed, undefined);
    assert.deepEqual(got.frames, [new Uint8Array([0]), new Uint8Array([1]), new Uint8Array([2])]);
    await a.close();
    const b = await pair();
    const gotB = collect(b.server);
    const clientClosed = collect(b.client).closed;
    b.client.destroy(new TransferError('cancelled', 'test'));
    await gotB.closed;
    assert.ok((await clientClosed) instanceof TransferError);
    await assert.rejects(b.client.drained(10), TransferError);
    await b.close();
  });

  test(`${name}: a peer without the cluster secret gets no channel`, async () => {
    const refused: Error[] = [];
    const transport = factory.make({ secret: SECRET, onRefused: (e) => refused.push(e) });
    let accepted = 0;
    const listener = await transport.listen(factory.address, () => accepted++);
    const stranger = factory.make({ secret: new Uint8Array(randomBytes(32)) });
    await assert.rejects(
      stranger.connect(listener.address),
      (e) => e instanceof TransferError && e.reason === 'auth_failed',
    );
    await until('the refusal', () => refused.length === 1);
    assert.equal(accepted, 0);
    await listener.close();
  });

  test(`${name}: a KV transfer arrives byte-identical, with its first token`, async () => {
    const world = await makeWorld(factory.make({ secret: SECRET }), checksum, { address: factory.address });
    const t = startTransfer(world, checksum, 'req-1', 37);
    const result = await t.sent;
    const outcome = await t.outcome;
    assert.equal(outcome.state, 'COMMITTED');
    if (outcome.state === 'COMMITTED') assert.deepEqual(outcome.firstTokens, [FIRST_TOKEN]);
    assert.equal(result.pageCount, 10);
    assert.deepEqual(t.sink.bytes(), t.source.all);
    assert.deepEqual(t.sink.writes, [...Array(10).keys()]);
    assert.deepEqual(t.sink.writtenTokens, [4, 4, 4, 4, 4, 4, 4, 4, 4, 1]);
    t.sink.close();
    world.pool.checkClean();
    await world.close();
  });

  test(`${name}: concurrent transfers to one receiver each arrive intact`, async () => {
    const world = await makeWorld(factory.make({ secret: SECRET }), checksum, {
      address: factory.address,
      pageBytes: 64 * 1024,
    });
    const transfers = [13, 64, 1, 40].map((tokens, i) => startTransfer(world, checksum, `req-${i}`, tokens));
    await Promise.all(transfers.map((t) => t.sent));
    for (const t of transfers) {
      assert.equal((await t.outcome).state, 'COMMITTED');
      assert.deepEqual(t.sink.bytes(), t.source.all);
      t.sink.close();
    }
    assert.equal(world.receiver.liveCount, 0);
    world.pool.checkClean();
    assert.equal(world.pool.freeCount, world.pool.pageCount);
    await world.close();
  });
}
