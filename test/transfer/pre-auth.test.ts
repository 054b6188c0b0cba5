/**
 * Connections that have not authenticated yet (DESIGN I11) on a TCP listener: they have their own cap, separate from
 * authenticated peers'; beyond it the oldest is dropped for the newest; none lives past the pre-auth deadline. A flood
 * of bare connections neither cuts an authenticated peer nor keeps a new one out. A connecting side that gets no
 * authenticated connection in time sees worker_unavailable (a 503 for the client), not auth_failed.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { before, test } from 'node:test';
import { statusOf } from '../../src/gateway/errors.js';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { publicTransferError, TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import { KvfenceError } from '../../src/util/errors.js';
import { LIMITS } from '../../src/util/limits.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import type { TransportOptions } from '../../src/wire/transport.js';
import { bareFlood } from './bare-flood.js';
import { makeWorld, SECRET, startTransfer } from './harness.js';

let checksum: PageChecksum;
before(async () => {
  checksum = await createPageChecksum();
});

function tcp(options: Partial<TransportOptions> = {}): TcpTransport {
  return new TcpTransport({ secret: SECRET, clock: systemClock, handshakeTimeoutMs: 5_000, ...options });
}

test('bare connections: the oldest beyond the pre-auth cap is dropped, the rest at the pre-auth deadline', async () => {
  const refused: Error[] = [];
  const transport = tcp({ onRefused: (e) => refused.push(e) });
  const listener = await transport.listen('127.0.0.1:0', () => assert.fail('no bare connection authenticates'));
  const count = 300;
  const flood = await bareFlood(listener.address, count);
  await flood.allClosed;
  assert.equal(flood.livedMs.length, count, 'the server closed every one of them');
  const reasons = refused.map((e) => (e instanceof TransferError ? e.reason : e.message));
  const dropped = reasons.filter((r) => r === 'connection_closed').length;
  const expired = reasons.filter((r) => r === 'deadline_exceeded').length;
  assert.equal(refused.length, count);
  assert.equal(expired, LIMITS.preAuthConnectionsMax, 'the newest ones wait out the deadline');
  assert.equal(dropped, count - LIMITS.preAuthConnectionsMax, 'older ones made room for newer ones');
  const longest = Math.max(...flood.livedMs);
  // the deadline, plus scheduling slack on a loaded 2-core machine
  assert.ok(longest < LIMITS.preAuthTimeoutMsMax + 1_000, `a bare connection lived ${longest.toFixed(0)} ms`);
  await listener.close();
});

test('during a flood of bare connections an authenticated peer keeps its channel and a new one gets in', async () => {
  const w = await makeWorld(tcp(), checksum, { address: '127.0.0.1:0', idleTimeoutMs: 30_000 });
  // an authenticated connection from before the flood (as a gateway's control link is)
  const peer: FrameChannel = await tcp().connect(w.listener.address);
  peer.setHandlers({ frame: () => {}, close: () => {} });
  const flood = await bareFlood(w.listener.address, 1_000);
  // new connections while the flood is on: each transfer connects and authenticates afresh
  const transfers = [0, 1, 2, 3].map((i) => startTransfer(w, checksum, `req-${i}`, 40));
  for (const t of transfers) {
    await t.sent;
    assert.equal((await t.outcome).state, 'COMMITTED');
    assert.deepEqual(t.sink.bytes(), t.source.all);
    t.sink.close();
  }
  await flood.allClosed;
  assert.equal(flood.livedMs.length, 1_000);
  assert.equal(peer.closed, false, 'the flood did not cut the authenticated connection');
  assert.equal(w.receiver.connectionCount, 1, "it is still the receiver's");
  peer.destroy();
  w.pool.checkClean();
  await w.close();
});

test('no authenticated connection in time is worker_unavailable (503), a wrong secret stays auth_failed', async () => {
  // a listener that drops every connection at once: what a peer sees when a flooded port keeps dropping it
  let accepted = 0;
  const dropping = createServer((s) => {
    accepted++;
    s.destroy();
  });
  await new Promise<void>((r) => dropping.listen(0, '127.0.0.1', r));
  const address = `127.0.0.1:${(dropping.address() as { port: number }).port}`;
  const started = performance.now();
  const error = await tcp({ handshakeTimeoutMs: 400 })
    .connect(address)
    .then(
      () => assert.fail('connected'),
      (e: unknown) => e,
    );
  const tookMs = performance.now() - started;
  assert.ok(error instanceof KvfenceError && !(error instanceof TransferError), String(error));
  assert.equal(error.code, 'worker_unavailable');
  assert.doesNotMatch(error.message, /127\.0\.0\.1/, 'no internal address for the client');
  assert.ok(accepted >= 2, `it tried again (${accepted} tries)`);
  assert.ok(tookMs < 400 + 500, `gave up at the deadline (${tookMs.toFixed(0)} ms)`);
  // what the prefill worker hands the gateway, and the status the gateway answers with
  assert.equal(publicTransferError(error).code, 'worker_unavailable');
  assert.equal(statusOf(publicTransferError(error).code), 503);
  await new Promise<void>((r) => dropping.close(() => r()));

  const w = await makeWorld(tcp(), checksum, { address: '127.0.0.1:0' });
  await assert.rejects(
    tcp({ secret: new Uint8Array(32).fill(7) }).connect(w.listener.address),
    (e) => e instanceof TransferError && e.reason === 'auth_failed',
  );
  await w.close();
});
