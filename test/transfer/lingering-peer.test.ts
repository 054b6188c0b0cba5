/**
 * A connection the decode side has ended (a refusal, a failure, a COMMIT acknowledged) waits for the peer to close its
 * side for at most the idle timeout, and is cut off then (I6: every wait has a timeout; I11: a stuck or hostile peer
 * holds no connection slot and no listener close). The peers here authenticate over sockets that stay half-open
 * (`allowHalfOpen`), as a frozen or partitioned prefill's would: they never answer the end with their own.
 */
import assert from 'node:assert/strict';
import { type AddressInfo, createConnection, createServer } from 'node:net';
import { type TestContext, test } from 'node:test';
import { createPageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferSender } from '../../src/transfer/transfer-sender.js';
import { encodeHello } from '../../src/transfer/wire-format.js';
import { systemClock } from '../../src/util/clock.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import { authenticate } from '../../src/wire/peer-auth.js';
import { socketByteStream } from '../../src/wire/socket-stream.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import {
  expectTransfer,
  FIRST_TOKEN,
  makeWorld,
  onePageTicket,
  randomSource,
  SECRET,
  until,
  type World,
} from './harness.js';

const IDLE_MS = 300;

/** A decode side; whatever a failed test leaves open is closed after it, so a regression fails instead of hanging */
async function world(t: TestContext, idleTimeoutMs: number): Promise<World> {
  const transport = new TcpTransport({ secret: SECRET, clock: systemClock, handshakeTimeoutMs: 5_000 });
  const w = await makeWorld(transport, await createPageChecksum(), { idleTimeoutMs, address: '127.0.0.1:0' });
  t.after(() => w.receiver.close());
  return w;
}

/** An authenticated connection whose side never closes, whatever the other side does (until the test ends). */
async function stubbornPeer(t: TestContext, address: string): Promise<FrameChannel> {
  const [host, port] = address.split(':') as [string, string];
  const socket = createConnection({ host, port: Number(port), allowHalfOpen: true });
  t.after(() => socket.destroy());
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  return authenticate(socketByteStream(socket), 'initiator', {
    secret: SECRET,
    clock: systemClock,
    timeoutMs: 5_000,
  });
}

/** A HELLO for a request the decode side never expected: it is refused (ABORT, then the end). */
function strangerHello(): Uint8Array[] {
  return encodeHello(onePageTicket('nobody-expects-this', 4096));
}

/** ms until `closing` settles; fails past `limitMs` (before the cut-off, the listener waited forever) */
async function msUntil(closing: Promise<void>, limitMs: number): Promise<number> {
  const start = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still waiting after ${limitMs} ms`)), limitMs);
  });
  try {
    await Promise.race([closing, late]);
  } finally {
    clearTimeout(timer);
  }
  return performance.now() - start;
}

test('a refused connection whose peer never closes is cut off after the idle timeout, and the listener closes', {
  timeout: 20_000,
}, async (t) => {
  const w = await world(t, IDLE_MS);
  const peer = await stubbornPeer(t, w.listener.address);
  peer.setHandlers({ frame: () => {}, close: () => {} });
  peer.send(strangerHello());
  const ms = await msUntil(w.listener.close(), 10_000);
  assert.ok(ms >= IDLE_MS / 2, `cut off after ${ms.toFixed(0)} ms, before the peer had its grace`);
});

test('after a COMMIT is acknowledged, a peer that never closes is cut off after the idle timeout', {
  timeout: 20_000,
}, async (t) => {
  const w = await world(t, IDLE_MS);
  const checksum = await createPageChecksum();
  const { sink, handle } = expectTransfer(w, 'r-commit', 8);
  const source = randomSource(sink.pageCount, w.pool.pageBytes, checksum);
  const sender = new TransferSender(await stubbornPeer(t, w.listener.address), handle.ticket, {
    clock: systemClock,
    deadlineMs: 10_000,
    idleTimeoutMs: 10_000,
  });
  await sender.send(source, [FIRST_TOKEN]);
  assert.equal((await handle.outcome).state, 'COMMITTED');
  await msUntil(w.listener.close(), 10_000);
});

test('closing the receiver cuts off the connections it has ended at once, without waiting out their grace', {
  timeout: 20_000,
}, async (t) => {
  const w = await world(t, 60_000);
  const peer = await stubbornPeer(t, w.listener.address);
  let refused = false;
  peer.setHandlers({ frame: () => (refused = true), close: () => {} });
  peer.send(strangerHello());
  while (!refused) await new Promise((r) => setTimeout(r, 2)); // the ABORT came: the decode side has ended it
  await msUntil(w.close(), 5_000);
});

test('a prefill that aborts cuts off a receiver that never closes its side, after the idle timeout', {
  timeout: 20_000,
}, async (t) => {
  // a decode side that authenticates, reads and never closes (its sockets stay half-open)
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    t.after(() => socket.destroy());
    authenticate(socketByteStream(socket), 'responder', { secret: SECRET, clock: systemClock, timeoutMs: 5_000 }).then(
      (channel) => channel.setHandlers({ frame: () => {}, close: () => {} }),
      () => {},
    );
  });
  t.after(() => server.close());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const transport = new TcpTransport({ secret: SECRET, clock: systemClock, handshakeTimeoutMs: 5_000 });
  const channel = await transport.connect(`127.0.0.1:${port}`);
  t.after(() => channel.destroy());
  // as the prefill worker refuses a job before any page (prefill-worker.ts): a sender that only aborts
  const ticket = onePageTicket('r-abort', 4096);
  new TransferSender(channel, ticket, { clock: systemClock, deadlineMs: 10_000, idleTimeoutMs: IDLE_MS }).abort(
    'context_length_exceeded',
    'the prompt does not fit',
  );
  const start = performance.now();
  await until('the aborted connection to be cut off', () => channel.closed, 10_000);
  const ms = performance.now() - start;
  assert.ok(ms >= IDLE_MS / 2, `cut off after ${ms.toFixed(0)} ms, before the receiver had its grace`);
});
