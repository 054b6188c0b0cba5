/**
 * Confidential transit (DESIGN I12): what crosses the wire between workers is encrypted. The bytes of a KV transfer,
 * both ways, contain none of its page bytes, its tenant or its request id; a frame of prompt token ids is not
 * readable on the wire; the same frame sent twice looks different (the nonce moves on); one altered ciphertext byte
 * ends the session fail-closed, delivering nothing from that frame on.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import type { ByteStream } from '../../src/wire/byte-stream.js';
import type { FrameChannel } from '../../src/wire/frame-channel.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import type { TransportOptions } from '../../src/wire/transport.js';
import { overStream, withByteFaults } from '../helpers/fault-injection.js';
import { makeWorld, SECRET, startTransfer, until } from './harness.js';

const HANDSHAKE_BYTES_SENT = 38 + 37; // AUTH_HELLO and AUTH_PROOF, the initiator's two handshake messages
const SEAL_BYTES = 4 + 16; // length prefix and AEAD tag around each frame's ciphertext

let checksum: PageChecksum;
before(async () => {
  checksum = await createPageChecksum();
});

function tcp(options: Partial<TransportOptions> = {}): TcpTransport {
  return new TcpTransport({ secret: SECRET, clock: systemClock, handshakeTimeoutMs: 2_000, ...options });
}

/** A connecting side's raw stream that keeps a copy of every write (out) and every read (in). */
function recording(): { wrap: (s: ByteStream) => ByteStream; out: Uint8Array[]; in: Uint8Array[] } {
  const out: Uint8Array[] = [];
  const inbound: Uint8Array[] = [];
  const wrap = (s: ByteStream): ByteStream =>
    overStream(s, {
      setHandlers: (h) =>
        s.setHandlers({
          ...h,
          data: (bytes) => {
            inbound.push(new Uint8Array(bytes));
            h.data(bytes);
          },
        }),
      write(chunks) {
        out.push(new Uint8Array(Buffer.concat(chunks)));
        return s.write(chunks);
      },
    });
  return { wrap, out, in: inbound };
}

function contains(haystack: Uint8Array, needle: string | Buffer): boolean {
  return Buffer.from(haystack.buffer, haystack.byteOffset, haystack.byteLength).includes(needle);
}

/** An echo listener and a recorded connection to it. */
async function echoPair(wrap: (s: ByteStream) => ByteStream) {
  const server = tcp();
  const received: Uint8Array[] = [];
  let serverClose: (e: TransferError | undefined) => void = () => {};
  const serverClosed = new Promise<TransferError | undefined>((r) => {
    serverClose = r;
  });
  const listener = await server.listen('127.0.0.1:0', (c: FrameChannel) =>
    c.setHandlers({ frame: (b) => received.push(new Uint8Array(b)), close: (e) => serverClose(e) }),
  );
  const client = await tcp({ wrapConnectStream: wrap }).connect(listener.address);
  return { client, received, serverClosed, close: () => listener.close() };
}

test('a KV transfer carries no page byte, tenant or request id in clear, either way', async () => {
  const w = await makeWorld(tcp(), checksum, { address: '127.0.0.1:0' });
  const pattern = Buffer.from('KVFENCE-KNOWN-PAGE-PATTERN|');
  const rec = recording();
  const t = startTransfer(w, checksum, 'req-plaintext-marker', 24, (c) => c, {
    tenant: 'tenant-plaintext-marker',
    transport: tcp({ wrapConnectStream: rec.wrap }),
    source: (pageCount, pageBytes) => {
      const all = new Uint8Array(pageCount * pageBytes);
      for (let at = 0; at < all.byteLength; at += pattern.byteLength)
        all.set(pattern.subarray(0, all.byteLength - at), at);
      const pageView = (i: number) => all.subarray(i * pageBytes, (i + 1) * pageBytes);
      return {
        pageCount,
        pageBytes,
        all,
        pageView,
        checksums: Array.from({ length: pageCount }, (_, i) => checksum.of(pageView(i))),
      };
    },
  });
  await t.sent;
  assert.equal((await t.outcome).state, 'COMMITTED');
  // the pattern did cross: the decode side holds it, byte for byte
  assert.ok(contains(t.sink.bytes(), pattern));
  assert.deepEqual(t.sink.bytes(), t.source.all);
  const out = Buffer.concat(rec.out);
  const back = Buffer.concat(rec.in);
  assert.ok(out.byteLength > t.source.all.byteLength, 'every page went through the recorded stream');
  for (const needle of [pattern.subarray(0, 12), 'tenant-plaintext-marker', 'req-plaintext-marker']) {
    assert.equal(contains(out, needle), false, `prefill → decode bytes show ${needle}`);
    assert.equal(contains(back, needle), false, `decode → prefill bytes show ${needle}`);
  }
  t.sink.close();
  w.pool.checkClean();
  await w.close();
});

test('prompt token ids in a frame are not on the wire; the same frame twice is two different ciphertexts', async () => {
  const rec = recording();
  const pair = await echoPair(rec.wrap);
  const frame = Buffer.from(JSON.stringify({ type: 'prefill', promptTokens: new Array(200).fill(31337) }));
  pair.client.send([frame]);
  pair.client.send([frame]);
  await until('both frames', () => pair.received.length === 2);
  assert.deepEqual(pair.received, [new Uint8Array(frame), new Uint8Array(frame)]);
  // writes: AUTH_HELLO, AUTH_PROOF, then one write per frame
  assert.equal(rec.out.length, 4);
  const [first, second] = [rec.out[2]!, rec.out[3]!];
  assert.equal(first.byteLength, frame.byteLength + SEAL_BYTES);
  assert.equal(contains(first, '31337,31337'), false);
  assert.equal(contains(second, '31337,31337'), false);
  assert.deepEqual(first.subarray(0, 4), second.subarray(0, 4), 'the length prefix travels in clear (as AAD)');
  assert.notDeepEqual(first.subarray(4), second.subarray(4), 'a fresh nonce per frame');
  pair.client.end();
  assert.equal(await pair.serverClosed, undefined);
  await pair.close();
});

test('one altered ciphertext byte ends the session: mac_invalid, nothing of that frame or later ones delivered', async () => {
  const frameBytes = 100;
  // the 11th ciphertext byte of the second frame
  const at = HANDSHAKE_BYTES_SENT + (frameBytes + SEAL_BYTES) + 4 + 10;
  const pair = await echoPair((s) => withByteFaults(s, { corruptByteAt: at }));
  const clientClosed = new Promise<TransferError | undefined>((resolve) =>
    pair.client.setHandlers({ frame: () => {}, close: resolve }),
  );
  for (let i = 0; i < 3; i++) pair.client.send([new Uint8Array(frameBytes).fill(i + 1)]);
  const error = await pair.serverClosed;
  assert.ok(error instanceof TransferError && error.reason === 'mac_invalid', String(error));
  assert.deepEqual(pair.received, [new Uint8Array(frameBytes).fill(1)]);
  await clientClosed; // the sender sees its connection cut
  assert.equal(pair.client.closed, true);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(pair.received.length, 1, 'no frame after the forged one');
  await pair.close();
});
