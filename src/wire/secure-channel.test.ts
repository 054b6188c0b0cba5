/**
 * The sender's sealed-frame buffers: a page-sized frame goes out in a buffer the stream handed back from an earlier
 * frame of its size, never in one the stream still holds, nor in one the caller owns, and what arrives is every frame
 * intact.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ByteStream, ByteStreamHandlers } from './byte-stream.js';
import { AEAD_KINDS } from './frame-aead.js';
import { SecureChannel } from './secure-channel.js';

/** A stream that keeps what is written and hands buffers back only when told to. */
function heldStream() {
  const written: { bytes: Uint8Array; copy: Uint8Array; release: (() => void) | undefined }[] = [];
  const stream: ByteStream = {
    closed: false,
    setHandlers: (_: ByteStreamHandlers) => {},
    end: () => {},
    destroy: () => {},
    write(chunks, released) {
      assert.equal(chunks.length, 1, 'a sealed frame is one buffer');
      written.push({ bytes: chunks[0]!, copy: new Uint8Array(chunks[0]!), release: released });
      return true;
    },
  };
  return { stream, written };
}

const KEY = new Uint8Array(32).fill(1);
const PAGE = 256 * 1024;

test('a page-sized frame reuses only a buffer the stream has handed back, and small frames are never pooled', () => {
  const { stream, written } = heldStream();
  const channel = new SecureChannel(stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  const frame = (fill: number) => [new Uint8Array(PAGE).fill(fill)];
  channel.send(frame(1));
  channel.send(frame(2)); // the first is still held: a new buffer
  assert.notEqual(written[1]!.bytes.buffer, written[0]!.bytes.buffer);
  written[0]!.release!();
  channel.send(frame(3)); // the first was handed back: its buffer again
  assert.equal(written[2]!.bytes.buffer, written[0]!.bytes.buffer);
  channel.send(frame(4)); // the second is still held, the first is out again
  assert.notEqual(written[3]!.bytes.buffer, written[1]!.bytes.buffer);
  assert.notEqual(written[3]!.bytes.buffer, written[2]!.bytes.buffer);
  // what went out for frame 2 was not touched by the later frames: only handed-back buffers are written again
  assert.equal(Buffer.compare(written[1]!.bytes, written[1]!.copy), 0);
  assert.equal(Buffer.compare(written[3]!.bytes, written[3]!.copy), 0);
  channel.send([new Uint8Array(100)]);
  assert.equal(written[4]!.release, undefined, 'a small frame comes from node’s pool and is not handed back');
  channel.destroy();
  written[3]!.release!(); // after the close nothing is kept
  assert.equal(spares(channel).length, 0);
});

/** the channel's spare buffers (private: looked at only here) */
const spares = (channel: SecureChannel) => (channel as unknown as { spares: Uint8Array[] }).spares;

test('the spares are bounded in number and in bytes, the oldest going first', () => {
  const { stream, written } = heldStream();
  const channel = new SecureChannel(stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  for (let i = 0; i < 6; i++) channel.send([new Uint8Array(PAGE)]);
  for (const w of written) w.release!();
  assert.deepEqual(
    spares(channel).map((b) => b.buffer),
    written.slice(2).map((w) => w.bytes.buffer),
    'the four last handed back',
  );
  for (let i = 0; i < 3; i++) channel.send([new Uint8Array(3 * 1024 * 1024)]);
  for (const w of written.slice(6)) w.release!();
  const kept = spares(channel).reduce((n, b) => n + b.byteLength, 0);
  assert.ok(kept <= 8 * 1024 * 1024, `${kept} bytes kept`);
  assert.equal(spares(channel).at(-1)!.buffer, written.at(-1)!.bytes.buffer, 'the newest is kept');
  channel.destroy();
});

/** A stream to read frames from: what is fed to it is read, as from a socket. */
function inboundStream() {
  let feed: ByteStreamHandlers | undefined;
  const stream: ByteStream = {
    closed: false,
    setHandlers: (h) => {
      feed = h;
    },
    end: () => {},
    destroy: () => {},
    write: () => true,
  };
  return { stream, feed: (bytes: Uint8Array) => feed!.data(bytes) };
}

for (const kind of AEAD_KINDS) {
  test(`send takes what it needs before it returns: pages scrubbed then still arrive as they were (${kind})`, async () => {
    // the prefill worker releases (zeroes) the pages it sent once the send settles, while the socket may still hold
    // sealed frames: nothing queued may be a view of them
    const out = heldStream();
    const sender = new SecureChannel(out.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, kind);
    const sent: Uint8Array[] = [];
    for (let i = 0; i < 3; i++) {
      const page = new Uint8Array(PAGE).map((_, j) => (j * 5 + i) & 0xff);
      sent.push(page.slice());
      sender.send([page.subarray(0, 64), page.subarray(64)]);
      page.fill(0);
    }
    await new Promise((resolve) => setImmediate(resolve)); // whatever the channel might have left for later runs now
    const inbound = inboundStream();
    const received: Uint8Array[] = [];
    const receiver = new SecureChannel(inbound.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, kind);
    receiver.setHandlers({ frame: (b) => received.push(b.slice()), close: () => {} });
    for (const w of out.written) inbound.feed(w.bytes); // the buffers the stream still holds, not copies
    assert.deepEqual(received, sent);
  });

  test(`frames sealed into handed-back buffers open to exactly what was sent, read in odd pieces (${kind})`, () => {
    const out = heldStream();
    const sender = new SecureChannel(out.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, kind);
    const sent: Uint8Array[] = [];
    for (let i = 0; i < 12; i++) {
      const page = new Uint8Array(PAGE).map((_, j) => (j * 7 + i) & 0xff);
      sent.push(page);
      sender.send([page.subarray(0, 100), page.subarray(100)]);
      out.written[i]!.release!(); // at once: every later frame reuses a buffer
    }
    const received: Uint8Array[] = [];
    const inbound = inboundStream();
    const receiver = new SecureChannel(inbound.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, kind);
    receiver.setHandlers({ frame: (b) => received.push(b.slice()), close: () => {} });
    // reads that split frames, blocks and tags anywhere, as a socket's do
    const wire = Buffer.concat(out.written.map((w) => w.copy));
    for (let at = 0, i = 0; at < wire.byteLength; i++) {
      const n = [65_536, 1, 13, 4095, 63][i % 5]!;
      inbound.feed(wire.subarray(at, at + n));
      at += n;
    }
    assert.deepEqual(received, sent);
  });
}

/** A stream whose data the test feeds: the handlers the channel gave it. */
function fedStream() {
  let handlers: ByteStreamHandlers | undefined;
  const stream: ByteStream = {
    closed: false,
    setHandlers: (h: ByteStreamHandlers) => {
      handlers = h;
    },
    end: () => {},
    destroy: () => {},
    write: () => true,
  };
  return { stream, feed: (bytes: Uint8Array) => handlers!.data(bytes) };
}

/** the channel's plaintext buffer (private: looked at only here) */
const plain = (channel: SecureChannel) => (channel as unknown as { plain: Uint8Array }).plain;

test('the receiver’s plaintext buffer grows with the ciphertext that came, not with the length a frame declares', () => {
  // a peer declares a 64 MiB frame and sends four bytes of it: that costs the receiver four bytes, not 64 MiB
  const idle = fedStream();
  const lured = new SecureChannel(idle.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  lured.setHandlers({ frame: () => {}, close: () => {} });
  const length = new Uint8Array(8);
  new DataView(length.buffer).setUint32(0, 64 << 20, true);
  idle.feed(length);
  assert.ok(plain(lured).byteLength <= 4, `${plain(lured).byteLength} bytes for 4 of ciphertext`);
  lured.destroy();
  // a real frame that arrives in pieces still opens whole, the plaintext kept across each growth
  const { stream, written } = heldStream();
  const sender = new SecureChannel(stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  const page = new Uint8Array(PAGE).map((_, i) => (i * 7) & 0xff);
  sender.send([page]);
  const wire = written[0]!.bytes;
  const fed = fedStream();
  const receiver = new SecureChannel(fed.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  const frames: Uint8Array[] = [];
  receiver.setHandlers({ frame: (f) => frames.push(new Uint8Array(f)), close: () => {} });
  for (let at = 0; at < wire.byteLength; at += 1000) fed.feed(wire.subarray(at, at + 1000));
  assert.equal(frames.length, 1);
  assert.equal(Buffer.compare(frames[0]!, page), 0);
  sender.destroy();
  receiver.destroy();
});

test('a frame longer than the owner’s limit fails the channel at its length prefix: none of it is buffered', () => {
  const { stream, written } = heldStream();
  const sender = new SecureChannel(stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  sender.send([new Uint8Array(100).fill(1)]);
  sender.send([new Uint8Array(101).fill(2)]);
  const fed = fedStream();
  const receiver = new SecureChannel(fed.stream, new Uint8Array(KEY), new Uint8Array(KEY), undefined, 'aegis-256x4');
  const frames: number[] = [];
  let closed: string | undefined;
  receiver.limitFrames(100);
  receiver.setHandlers({ frame: (f) => frames.push(f.byteLength), close: (e) => (closed = e?.reason) });
  fed.feed(written[0]!.bytes); // at the limit: opens
  fed.feed(written[1]!.bytes.subarray(0, 8)); // one byte over: refused from its length alone
  assert.deepEqual([frames, closed], [[100], 'frame_too_large']);
  assert.ok(plain(receiver).byteLength <= 100, 'nothing of the long frame held');
  sender.destroy();
});
