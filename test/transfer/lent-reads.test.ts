/**
 * A stream lends each read to its handler for that call only (ByteStreamHandlers.data): the TCP stream reads every
 * chunk into one buffer it reuses. The handshake and the secure channel must copy whatever they keep past the call —
 * a nonce, a message split across reads, the leftover after the handshake, a length or tag split across reads, frames
 * waiting for their owner — or a later read overwrites it. Here the responder's reads come in pieces of every size
 * through one buffer that is scribbled over after each call: every frame must still arrive intact.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { setImmediate } from 'node:timers/promises';
import { systemClock } from '../../src/util/clock.js';
import { SeededRandom } from '../../src/util/random.js';
import type { ByteStream, ByteStreamHandlers } from '../../src/wire/byte-stream.js';
import { createMemoryPipe } from '../../src/wire/memory-pipe.js';
import { authenticate } from '../../src/wire/peer-auth.js';
import { overStream } from '../helpers/fault-injection.js';
import { receiveFrames, SECRET } from './harness.js';

/** `inner`'s reads, handed on in pieces of 1 to `maxPiece` bytes, each in the same buffer, scribbled after the call */
function lendingStream(inner: ByteStream, seed: number, maxPiece: number): ByteStream {
  const random = new SeededRandom(seed);
  const lent = new Uint8Array(maxPiece);
  return overStream(inner, {
    setHandlers(handlers: ByteStreamHandlers) {
      inner.setHandlers({
        ...handlers,
        data: (bytes) => {
          for (let at = 0; at < bytes.byteLength; ) {
            const n = Math.min(bytes.byteLength - at, 1 + random.nextInt(maxPiece));
            lent.set(bytes.subarray(at, at + n));
            handlers.data(lent.subarray(0, n));
            lent.fill(0xa5); // what a later read would leave there
            at += n;
          }
        },
      });
    },
  });
}

for (const [seed, maxPiece] of [
  [1, 3],
  [2, 40],
  [3, 70_000],
] as const) {
  test(`reads lent in pieces of up to ${maxPiece} bytes: the handshake and every frame come through intact`, async () => {
    const [a, b] = createMemoryPipe({ highWaterBytes: 1 << 20 });
    const auth = { secret: SECRET, clock: systemClock, timeoutMs: 5_000 };
    const [initiator, responder] = await Promise.all([
      authenticate(a, 'initiator', auth),
      authenticate(lendingStream(b, seed, maxPiece), 'responder', auth),
    ]);
    const sizes = [1, 3, 17, 4096, 65_537, 200_000];
    const sent = sizes.map((n) => new Uint8Array(randomBytes(n)));
    for (const frame of sent.slice(0, 3)) initiator.send([frame]);
    await setImmediate(); // these arrive before the responder's channel has an owner: they wait in it
    await setImmediate();
    const received = receiveFrames(responder, sent.length);
    for (const frame of sent.slice(3)) initiator.send([frame]);
    assert.deepEqual(await received, sent);
    initiator.destroy();
  });
}
