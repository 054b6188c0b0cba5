import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { type AddressInfo, createConnection, createServer, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { setImmediate } from 'node:timers/promises';
import { loadAddon } from '../../src/compute/native-backend.js';
import { systemClock } from '../../src/util/clock.js';
import type { ByteStream } from '../../src/wire/byte-stream.js';
import type { AeadKind } from '../../src/wire/frame-aead.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import { authenticate } from '../../src/wire/peer-auth.js';
import type { SecureChannel } from '../../src/wire/secure-channel.js';
import { ReusedReads, rewrapAccepted, socketByteStream } from '../../src/wire/socket-stream.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import { overStream } from '../helpers/fault-injection.js';
import { receiveFrames, SECRET } from './harness.js';
import { transportConformance } from './transport-conformance.js';

const tcp = (aead?: AeadKind) => (options: { secret: Uint8Array }) =>
  new TcpTransport({ ...options, clock: systemClock, handshakeTimeoutMs: 2_000, ...(aead ? { aead } : {}) });

transportConformance('tcp', { make: tcp(), address: '127.0.0.1:0' });
// the fallback where the addon is not built (node:crypto's AES-256-GCM): the whole suite again
transportConformance('tcp with node:crypto frames', {
  make: tcp('aes-256-gcm/node:crypto'),
  address: '127.0.0.1:0',
});

/** the AEAD a channel's handshake agreed on */
const aeadOf = (c: FrameChannel | undefined) => (c as SecureChannel | undefined)?.aead;

test('tcp: a side with the addon and one without agree on AES-256-GCM, frames of every size both ways', async () => {
  let server: FrameChannel | undefined;
  const listener = await tcp()({ secret: SECRET }).listen('127.0.0.1:0', (c) => {
    server = c;
    c.setHandlers({ frame: (b) => c.send([b.slice()]), close: () => {} });
  });
  const client = await tcp('aes-256-gcm/node:crypto')({ secret: SECRET }).connect(listener.address);
  const sizes = [1, 15, 16, 17, 4096, 65_537, 300_000, 2 * 1024 * 1024 + 3];
  const sent = sizes.map((n) => new Uint8Array(randomBytes(n)));
  const echoed = receiveFrames(client, sent.length);
  for (const frame of sent) client.send([frame.subarray(0, 3), frame.subarray(3)]);
  const timer = setTimeout(() => client.destroy(), 10_000);
  assert.deepEqual(await echoed, sent);
  clearTimeout(timer);
  assert.equal(aeadOf(server), 'aes-256-gcm', 'the side with the addon seals GCM with it');
  assert.equal(aeadOf(client), 'aes-256-gcm/node:crypto');
  client.end();
  await listener.close();
});

test('tcp: two sides with the addon agree on AEGIS-256X4', async (t) => {
  if (!loadAddon().aegis256x4Runs) return t.skip('this CPU has no AES instructions: no AEGIS-256X4');
  let server: FrameChannel | undefined;
  const listener = await tcp()({ secret: SECRET }).listen('127.0.0.1:0', (c) => {
    server = c;
    c.setHandlers({ frame: (b) => c.send([b.slice()]), close: () => {} });
  });
  const client = await tcp()({ secret: SECRET }).connect(listener.address);
  const echoed = receiveFrames(client, 1);
  client.send([new Uint8Array([1, 2, 3])]);
  assert.deepEqual(await echoed, [new Uint8Array([1, 2, 3])]);
  assert.deepEqual([aeadOf(client), aeadOf(server)], ['aegis-256x4', 'aegis-256x4']);
  client.end();
  await listener.close();
});

test('tcp: a frame that cannot be sealed ends the channel at once, and nothing of it reaches the peer', async () => {
  const received: Uint8Array[] = [];
  let serverClosed: (e: Error | undefined) => void = () => {};
  const serverClose = new Promise<Error | undefined>((r) => {
    serverClosed = r;
  });
  const listener = await tcp()({ secret: SECRET }).listen('127.0.0.1:0', (c) =>
    c.setHandlers({ frame: (b) => received.push(b.slice()), close: serverClosed }),
  );
  const client = await tcp()({ secret: SECRET }).connect(listener.address);
  let clientError: Error | undefined;
  client.setHandlers({ frame: () => {}, close: (e) => (clientError = e) });
  client.send([new Uint8Array([1, 2, 3])]);
  // the addon refuses any input but a Uint8Array: a failure in the middle of sealing (its nonce already spent)
  const notBytes = new Uint16Array(4) as unknown as Uint8Array;
  assert.throws(() => client.send([new Uint8Array(2), notBytes]), TypeError);
  assert.equal(client.closed, true);
  assert.equal(clientError?.message.includes('sealing frame 1 failed'), true, String(clientError));
  assert.equal(client.send([new Uint8Array(1)]), false, 'a closed channel sends nothing');
  await serverClose;
  assert.deepEqual(received, [new Uint8Array([1, 2, 3])]);
  await listener.close();
});

test('tcp: page-sized frames arrive intact while their sealed buffers are handed back and reused', {
  timeout: 10_000,
}, async () => {
  const sent = Array.from({ length: 32 }, (_, i) => new Uint8Array(1_000_000).map((_, j) => (j * 13 + i) & 0xff));
  const received: Uint8Array[] = [];
  let arrived: () => void = () => {};
  let broke: (e: Error) => void = () => {};
  const all = new Promise<void>((resolve, reject) => {
    arrived = resolve;
    broke = reject;
  });
  const listener = await tcp()({ secret: SECRET }).listen('127.0.0.1:0', (c) =>
    c.setHandlers({
      frame: (b) => {
        received.push(b.slice());
        if (received.length === sent.length) arrived();
      },
      close: (e) => broke(e ?? new Error('closed early')),
    }),
  );
  // the buffers the client's frames go out in (a pass-through that hands `released` on)
  const buffers = new Set<ArrayBufferLike>();
  const wrapConnectStream = (stream: ByteStream): ByteStream =>
    overStream(stream, {
      write(chunks, released) {
        for (const c of chunks) if (c.byteLength > 1_000_000) buffers.add(c.buffer);
        return stream.write(chunks, released);
      },
    });
  const client = await new TcpTransport({
    secret: SECRET,
    clock: systemClock,
    handshakeTimeoutMs: 2_000,
    wrapConnectStream,
  }).connect(listener.address);
  client.setHandlers({ frame: () => {}, close: () => {} });
  try {
    for (const [i, frame] of sent.entries()) {
      client.send([frame]); // no waiting for drain: node queues what the kernel has not taken
      // and now and then the socket's write callbacks get to run, with more queued than the kernel takes at once
      if (i % 8 === 7) await setImmediate();
    }
    await all;
    assert.deepEqual(received, sent);
    assert.ok(buffers.size < sent.length, `${sent.length} frames went out in ${buffers.size} buffers: none reused`);
  } finally {
    client.destroy();
    await listener.close();
  }
});

/** A listening server whose accepted sockets are paused, and a client connected to it: the accepted socket. */
async function acceptOne(): Promise<{ accepted: Socket; client: Socket; server: Server }> {
  let take: (s: Socket) => void = () => {};
  const taken = new Promise<Socket>((r) => {
    take = r;
  });
  const server = createServer({ pauseOnConnect: true }, take);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const client = createConnection({ port: (server.address() as AddressInfo).port, host: '127.0.0.1' });
  return { accepted: await taken, client, server };
}

test('tcp: an accepted connection is rewrapped to read into one reused buffer, and the connection carries on', {
  timeout: 10_000,
}, async () => {
  const { accepted, client, server } = await acceptOne();
  const reads = new ReusedReads();
  const socket = rewrapAccepted(accepted, reads);
  assert.notEqual(socket, accepted, 'rewrapped (the addon is built)');
  const sent = new Uint8Array(randomBytes(300_000));
  const got: Uint8Array[] = [];
  const buffers = new Set<ArrayBufferLike>();
  const all = new Promise<void>((resolve) => {
    let bytes = 0;
    reads.to = (b) => {
      buffers.add(b.buffer);
      got.push(b.slice());
      bytes += b.byteLength;
      if (bytes === sent.byteLength) resolve();
    };
  });
  let clientError: Error | undefined;
  client.on('error', (e) => (clientError = e));
  await new Promise((written) => client.write(sent.subarray(0, 1000), written));
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(got.length, 0, 'the rewrapped socket comes paused, as the accepted one was');
  socket.resume();
  client.write(sent.subarray(1000));
  await all;
  assert.deepEqual(Buffer.concat(got), Buffer.from(sent));
  assert.equal(buffers.size, 1, 'every read in the one buffer');
  // closing the accepted socket said nothing on the wire: the client hears the rewrapped one, then its end
  const echo = new Promise<Buffer>((r) => client.once('data', r));
  socket.write('pong');
  assert.equal((await echo).toString(), 'pong');
  const closed = new Promise((r) => socket.once('close', r));
  client.end();
  await closed;
  assert.equal(clientError, undefined);
  server.close();
});

test('tcp: without the addon an accepted socket stays as node made it, and still carries the handshake', {
  timeout: 10_000,
}, async () => {
  const { accepted, client, server } = await acceptOne();
  assert.equal(rewrapAccepted(accepted, new ReusedReads(), null), accepted);
  const [initiator, responder] = await Promise.all([
    authenticate(socketByteStream(client), 'initiator', { secret: SECRET, clock: systemClock, timeoutMs: 2_000 }),
    authenticate(socketByteStream(accepted), 'responder', { secret: SECRET, clock: systemClock, timeoutMs: 2_000 }),
  ]);
  const frame = new Promise<Uint8Array>((r) => responder.setHandlers({ frame: (b) => r(b.slice()), close: () => {} }));
  initiator.send([new Uint8Array([7, 8, 9])]);
  assert.deepEqual(await frame, new Uint8Array([7, 8, 9]));
  initiator.destroy();
  responder.destroy();
  server.close();
});

test('tcp: a listener’s close waits for the connections it took, rewrapped ones included (a drain relies on it)', {
  timeout: 10_000,
}, async () => {
  let server: FrameChannel | undefined;
  const listener = await tcp()({ secret: SECRET }).listen('127.0.0.1:0', (c) => {
    server = c;
    c.setHandlers({ frame: () => {}, close: () => {} });
  });
  const client = await tcp()({ secret: SECRET }).connect(listener.address);
  client.setHandlers({ frame: () => {}, close: () => {} });
  while (server === undefined) await setImmediate();
  let closed = false;
  const closing = listener.close().then(() => (closed = true));
  await new Promise((r) => setTimeout(r, 50));
  const closedEarly = closed;
  client.end();
  await closing;
  assert.equal(closedEarly, false, 'the listener closed while a connection it took was open');
});
