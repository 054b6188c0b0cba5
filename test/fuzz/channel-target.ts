/**
 * The secure channel fuzzed from the wire: after a real handshake, an on-path attacker replaces the encrypted bytes
 * of one frame by flipped, cut, spliced or random bytes. The receiver must deliver nothing but the frame that was sent
 * (and that only from the untouched ciphertext), and otherwise close with a TransferError; never throw, never hang.
 * The handshake itself is fuzzed the same way: a stranger's bytes never authenticate.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import type { ByteStream } from '../../src/wire/byte-stream.js';
import { createMemoryPipe } from '../../src/wire/memory-pipe.js';
import { authenticate } from '../../src/wire/peer-auth.js';
import type { SecureChannel } from '../../src/wire/secure-channel.js';
import { applyEdits, byteEdits, type Edit, mutatedBytes } from './byte-mutations.js';
import type { FuzzTarget } from './fuzz-target.js';

const SECRET = new Uint8Array(randomBytes(32));
const PAYLOAD = new Uint8Array(Buffer.from('a frame of KV bytes: 0123456789abcdef'.repeat(4)));
const OPTIONS = { secret: SECRET, timeoutMs: 2_000, clock: systemClock };

/** Everything one end writes, captured instead of sent. */
function capture(stream: ByteStream): { bytes(): Uint8Array; restore(): void } {
  const write = stream.write.bind(stream);
  const chunks: Uint8Array[] = [];
  stream.write = (parts) => {
    for (const p of parts) chunks.push(Uint8Array.from(p));
    return true;
  };
  return { bytes: () => Buffer.concat(chunks), restore: () => (stream.write = write) };
}

async function handshake(): Promise<{ a: ByteStream; initiator: SecureChannel; responder: SecureChannel }> {
  const [a, b] = createMemoryPipe({ highWaterBytes: 1 << 20 });
  const [initiator, responder] = await Promise.all([
    authenticate(a, 'initiator', OPTIONS),
    authenticate(b, 'responder', OPTIONS),
  ]);
  return { a, initiator, responder };
}

/** What the responder delivers until it closes (bounded wait). */
function received(channel: SecureChannel): Promise<{ frames: Uint8Array[]; error: TransferError | undefined }> {
  const frames: Uint8Array[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the channel neither closed nor failed within 5 s')), 5_000);
    channel.setHandlers({
      frame: (bytes) => frames.push(Uint8Array.from(bytes)),
      close: (error) => {
        clearTimeout(timer);
        resolve({ frames, error });
      },
    });
  });
}

/** The wire: the untouched sealed frame, the sealed frame with edits, or random bytes instead of it. */
type Tampering = { kind: 'none' } | { kind: 'edit'; edits: Edit[] } | { kind: 'random'; bytes: Uint8Array };

export const channelTarget: FuzzTarget<Tampering> = {
  name: 'channel',
  ciRuns: 300,
  async open() {
    return {
      input: fc.oneof(
        { weight: 1, arbitrary: fc.constant<Tampering>({ kind: 'none' }) },
        { weight: 12, arbitrary: byteEdits(4).map((edits): Tampering => ({ kind: 'edit', edits })) },
        {
          weight: 3,
          arbitrary: fc.uint8Array({ maxLength: 512 }).map((bytes): Tampering => ({ kind: 'random', bytes })),
        },
      ),
      async check(tampering) {
        const { a, initiator, responder } = await handshake();
        const tap = capture(a);
        initiator.send([PAYLOAD]); // sealed under this session's keys
        await new Promise((resolve) => setImmediate(resolve));
        const sealed = tap.bytes();
        tap.restore();
        assert.ok(sealed.length > PAYLOAD.length, 'the sealed frame was captured');
        const bytes =
          tampering.kind === 'none'
            ? sealed
            : tampering.kind === 'edit'
              ? applyEdits(sealed, tampering.edits)
              : tampering.bytes;
        const outcome = received(responder);
        a.write([bytes]);
        a.end();
        const { frames, error } = await outcome;
        for (const frame of frames) assert.deepEqual(frame, PAYLOAD, 'only the frame that was sent is delivered');
        if (Buffer.compare(Buffer.from(bytes), Buffer.from(sealed)) === 0) {
          assert.deepEqual([frames.length, error], [1, undefined], 'the untouched frame arrives');
        } else if (bytes.length === 0) {
          assert.deepEqual([frames.length, error], [0, undefined], 'nothing sent: a clean end');
        } else {
          const intact = bytes.length > sealed.length && Buffer.compare(bytes.subarray(0, sealed.length), sealed) === 0;
          assert.equal(frames.length, intact ? 1 : 0, 'a tampered frame is never delivered');
          assert.ok(error instanceof TransferError, `a tampered stream fails closed (${String(error)})`);
        }
      },
      async close() {},
    };
  },
};

export const handshakeTarget: FuzzTarget<Uint8Array> = {
  name: 'handshake',
  ciRuns: 300,
  async open() {
    // a real initiator's opening bytes, as seeds a stranger could replay or edit
    const [a, b] = createMemoryPipe({ highWaterBytes: 1 << 20 });
    const tap = capture(a);
    authenticate(a, 'initiator', { ...OPTIONS, timeoutMs: 50 }).catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 10));
    const opening = tap.bytes();
    a.destroy();
    b.destroy();
    return {
      input: mutatedBytes([opening, Buffer.concat([opening, new Uint8Array(64)])]),
      async check(bytes) {
        const [stranger, server] = createMemoryPipe({ highWaterBytes: 1 << 20 });
        const result = authenticate(server, 'responder', { ...OPTIONS, timeoutMs: 200 });
        stranger.write([bytes]);
        stranger.end();
        await assert.rejects(result, (e) => e instanceof TransferError, 'a stranger never authenticates');
      },
      async close() {},
    };
  },
};
