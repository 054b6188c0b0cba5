import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { systemClock } from '../../src/util/clock.js';
import type { AeadKind } from '../../src/wire/frame-aead.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import { SECRET } from './harness.js';
import { transportConformance } from './transport-conformance.js';

const tcp = (aead?: AeadKind) => (options: { secret: Uint8Array }) =>
  new TcpTransport({ ...options, clock: systemClock, handshakeTimeoutMs: 2_000, ...(aead ? { aead } : {}) });

transportConformance('tcp', { make: tcp(), address: '127.0.0.1:0' });
// the fallback where the addon is not built: the whole suite again
transportConformance('tcp with node:crypto frames', { make: tcp('node:crypto'), address: '127.0.0.1:0' });

test('tcp: a native-AEAD side and a node:crypto side understand each other, frames of every size both ways', async () => {
  let server: FrameChannel | undefined;
  const listener = await tcp('native')({ secret: SECRET }).listen('127.0.0.1:0', (c) => {
    server = c;
    c.setHandlers({ frame: (b) => c.send([b.slice()]), close: () => {} });
  });
  const client = await tcp('node:crypto')({ secret: SECRET }).connect(listener.address);
  const sizes = [1, 15, 16, 17, 4096, 65_537, 300_000, 2 * 1024 * 1024 + 3];
  const sent = sizes.map((n) => new Uint8Array(randomBytes(n)));
  const echoed: Uint8Array[] = [];
  const done = new Promise<void>((resolve, reject) => {
    client.setHandlers({
      frame: (b) => {
        echoed.push(b.slice());
        if (echoed.length === sent.length) resolve();
      },
      close: (e) => reject(e ?? new Error('closed early')),
    });
  });
  for (const frame of sent) client.send([frame.subarray(0, 3), frame.subarray(3)]);
  const timer = setTimeout(() => client.destroy(), 10_000);
  await done;
  clearTimeout(timer);
  assert.deepEqual(echoed, sent);
  assert.ok(server !== undefined);
  client.end();
  await listener.close();
});

test('tcp: a frame that cannot be sealed ends the channel at once, and nothing of it reaches the peer', async () => {
  const received: Uint8Array[] = [];
  let serverClosed: (e: Error | undefined) => void = () => {};
  const serverClose = new Promise<Error | undefined>((r) => {
    serverClosed = r;
  });
  const listener = await tcp('native')({ secret: SECRET }).listen('127.0.0.1:0', (c) =>
    c.setHandlers({ frame: (b) => received.push(b.slice()), close: serverClosed }),
  );
  const client = await tcp('native')({ secret: SECRET }).connect(listener.address);
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

test('tcp: many page-sized frames queued at once arrive intact (sealed buffers are reused only once written out)', {
  timeout: 10_000,
}, async () => {
  const sent = Array.from({ length: 40 }, (_, i) => new Uint8Array(300_000).map((_, j) => (j * 13 + i) & 0xff));
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
  const client = await tcp()({ secret: SECRET }).connect(listener.address);
  client.setHandlers({ frame: () => {}, close: () => {} });
  try {
    for (const frame of sent) client.send([frame]); // no waiting for drain: node queues them all
    await all;
    assert.deepEqual(received, sent);
  } finally {
    client.destroy();
    await listener.close();
  }
});
