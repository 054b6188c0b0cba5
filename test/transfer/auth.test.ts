/**
 * Peer authentication (DESIGN I10) over TCP: a stranger, a peer that skips the handshake, a replay of an earlier
 * session's bytes and a tampered frame all write no page, and are refused before any frame reaches the receiver.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { before, test } from 'node:test';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import type { ByteStream } from '../../src/wire/byte-stream.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import type { TransportOptions } from '../../src/wire/transport.js';
import { overStream, withByteFaults } from '../helpers/fault-injection.js';
import { expectTransfer, makeWorld, PAGE_SIZE_TOKENS, SECRET, startTransfer, until, type World } from './harness.js';

let checksum: PageChecksum;
before(async () => {
  checksum = await createPageChecksum();
});

function tcp(options: Partial<TransportOptions> = {}): TcpTransport {
  return new TcpTransport({ secret: SECRET, clock: systemClock, handshakeTimeoutMs: 500, ...options });
}

async function world(refused: Error[]): Promise<World> {
  return makeWorld(tcp({ onRefused: (e) => refused.push(e) }), checksum, { address: '127.0.0.1:0' });
}

/** Writes raw bytes to the listener and resolves when the server has closed the connection. */
function rawSession(address: string, bytes: Uint8Array): Promise<void> {
  const [host, port] = address.split(':') as [string, string];
  return new Promise((resolve) => {
    const socket = connect({ host, port: Number(port) }, () => socket.write(bytes));
    socket.on('data', () => {});
    socket.on('error', () => {});
    socket.on('close', () => resolve());
  });
}

function expectIdle(w: World) {
  return expectTransfer(w, 'req-live', 2 * PAGE_SIZE_TOKENS);
}

test('a peer with the wrong secret is refused and writes no page', async () => {
  const refused: Error[] = [];
  const w = await world(refused);
  const live = expectIdle(w);
  const stranger = tcp({ secret: new Uint8Array(randomBytes(32)) });
  await assert.rejects(
    stranger.connect(w.listener.address),
    (e) => e instanceof TransferError && e.reason === 'auth_failed',
  );
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(refused.length, 1);
  assert.equal(w.receiver.connectionCount, 0);
  assert.deepEqual(live.sink.writes, []);
  assert.equal(live.handle.state, 'AWAIT_HELLO');
  await w.close();
});

test('a peer that skips the handshake is refused', async () => {
  const refused: Error[] = [];
  const w = await world(refused);
  const live = expectIdle(w);
  // a would-be sealed frame straight away: not a handshake message
  await rawSession(w.listener.address, new Uint8Array(randomBytes(4096)));
  assert.equal(refused.length, 1);
  assert.ok(refused[0] instanceof TransferError && refused[0].reason === 'auth_failed');
  // and one that says nothing: the handshake timeout closes it
  await rawSession(w.listener.address, new Uint8Array(0));
  assert.equal(refused.length, 2);
  assert.deepEqual(live.sink.writes, []);
  await w.close();
});

test("a replay of an earlier session's bytes is refused and writes no page", async () => {
  const refused: Error[] = [];
  const w = await world(refused);
  const recorded: Uint8Array[] = [];
  const recording = tcp({
    wrapConnectStream: (s: ByteStream) =>
      overStream(s, {
        write(chunks) {
          recorded.push(Buffer.concat(chunks));
          return s.write(chunks);
        },
      }),
  });
  const first = startTransfer(w, checksum, 'req-live', 8, (c) => c, { transport: recording });
  await first.sent;
  first.sink.close();
  // the same request id is reserved again (a retry); the old session's bytes must not feed it
  const live = expectIdle(w);
  await rawSession(w.listener.address, Buffer.concat(recorded));
  assert.equal(refused.length, 1);
  assert.ok(refused[0] instanceof TransferError && refused[0].reason === 'auth_failed');
  assert.deepEqual(live.sink.writes, []);
  assert.equal(live.handle.state, 'AWAIT_HELLO');
  live.handle.cancel('test over');
  assert.equal((await live.handle.outcome).state, 'CANCELLED');
  w.pool.checkClean();
  await w.close();
});

test('a tampered frame fails its MAC: the transfer fails, nothing after it is written', async () => {
  const w = await world([]);
  // byte 75 + 90 + 100 lies inside the first PAGE frame (handshake 38 + 37, HELLO ~90)
  const tampering = tcp({ wrapConnectStream: (s) => withByteFaults(s, { corruptByteAt: 75 + 90 + 100 }) });
  const t = startTransfer(w, checksum, 'req-t', 16, (c) => c, { transport: tampering });
  await assert.rejects(t.sent, TransferError);
  const outcome = await t.outcome;
  assert.ok(outcome.state === 'FAILED' && outcome.error.reason === 'mac_invalid', outcome.state);
  assert.deepEqual(t.sink.writes, []);
  assert.ok(t.sink.released);
  w.pool.checkClean();
  await w.close();
});

test('an offer of ciphers altered on the wire fails the handshake instead of moving the pair to another cipher', async () => {
  const refused: Error[] = [];
  const w = await world(refused);
  const live = expectIdle(w);
  // AUTH_HELLO's last byte (offset 5 + 32) is the initiator's offer: AEGIS-256X4 and AES-256-GCM, altered so that the
  // responder, which takes the offer as it comes, picks AES-256-GCM; the responder's proof covers what it saw
  const downgrading = tcp({ wrapConnectStream: (s) => withByteFaults(s, { corruptByteAt: 37 }) });
  await assert.rejects(downgrading.connect(w.listener.address), (e) => {
    return e instanceof TransferError && e.reason === 'auth_failed' && /bad responder proof/.test(e.message);
  });
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.receiver.connectionCount, 0);
  assert.deepEqual(live.sink.writes, []);
  await w.close();
});

test('peers with no cipher in common are refused', async () => {
  const refused: Error[] = [];
  const listener = await tcp({ aead: 'aes-256-gcm/node:crypto', onRefused: (e) => refused.push(e) }).listen(
    '127.0.0.1:0',
    (c) => c.destroy(),
  );
  // told so in a proven challenge: refused at once, not tried again as if the worker were busy
  await assert.rejects(
    tcp({ aead: 'aegis-256x4' }).connect(listener.address),
    (e) => e instanceof TransferError && e.reason === 'auth_failed' && /no cipher in common/.test(e.message),
  );
  await new Promise((r) => setTimeout(r, 50));
  assert.match(String(refused[0]?.message), /no cipher in common/);
  await listener.close();
});

/** A raw connection that writes `bytes` and never closes its side (allowHalfOpen), until the test destroys it. */
function halfOpen(address: string, bytes: Uint8Array) {
  const [host, port] = address.split(':') as [string, string];
  const socket = connect({ host, port: Number(port), allowHalfOpen: true }, () => socket.write(bytes));
  socket.on('data', () => {});
  socket.on('error', () => {});
  return socket;
}

/** `promise`, or a rejection naming `what` after `ms` */
function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const hello = (version: number, offer?: number) =>
  new Uint8Array([0x4b, 0x56, 0x46, 0x41, version, ...randomBytes(32), ...(offer === undefined ? [] : [offer])]);

test('a stranger that offers no cipher we run, then keeps its side open, is cut off and holds up no close', async () => {
  const refused: Error[] = [];
  const listener = await tcp({ handshakeTimeoutMs: 5_000, onRefused: (e) => refused.push(e) }).listen(
    '127.0.0.1:0',
    (c) => c.destroy(),
  );
  const sockets = [0, 0x80].map((offer) => halfOpen(listener.address, hello(4, offer)));
  await until('the refusals', () => refused.length === 2, 2_000);
  // well before the 5 s handshake timeout: the refusal's last message has a short grace, not the handshake's time
  await within(2_000, 'the close', listener.close());
  for (const e of refused) assert.match(e.message, /no cipher in common/);
  for (const s of sockets) s.destroy();
});

test('an older peer is refused at its first message, not left to time out', async () => {
  const refused: Error[] = [];
  const listener = await tcp({ handshakeTimeoutMs: 5_000, onRefused: (e) => refused.push(e) }).listen(
    '127.0.0.1:0',
    (c) => c.destroy(),
  );
  const started = Date.now();
  const socket = halfOpen(listener.address, hello(3)); // version 3's AUTH_HELLO: one byte shorter than version 4's
  await within(2_000, 'the refusal', new Promise((r) => socket.once('end', r)));
  assert.ok(Date.now() - started < 2_000);
  assert.match(String(refused[0]?.message), /handshake version 3/);
  socket.destroy();
  await listener.close();
});
