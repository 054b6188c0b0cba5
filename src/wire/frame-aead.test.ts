/**
 * The frame AEAD's two implementations give the same bytes: each seals what the other seals, opens what the other
 * sealed, and refuses what was altered (ciphertext, tag, AAD or nonce) — checked on random frames cut into random
 * pieces. Where the addon is built (as in `npm test`), the channel's default is the native one.
 */
import assert from 'node:assert/strict';
import { createCipheriv } from 'node:crypto';
import { test } from 'node:test';
import fc from 'fast-check';
import { loadAddon } from '../compute/native-backend.js';
import { AEAD, AEAD_KINDS, type AeadKind, createFrameAead, TAG_BYTES } from './frame-aead.js';

interface Sealed {
  cipher: Uint8Array;
  tag: Uint8Array;
}

/** `plain` sealed in the given pieces (lengths, cycled), written at the same offsets of one buffer. */
function seal(kind: AeadKind, key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, plain: Uint8Array, cuts: number[]) {
  const aead = createFrameAead(key, true, kind);
  const cipher = new Uint8Array(plain.byteLength);
  const tag = new Uint8Array(TAG_BYTES);
  aead.start(nonce, aad);
  forPieces(plain.byteLength, cuts, (from, to) => aead.update(plain.subarray(from, to), cipher, from));
  aead.finishSeal(tag);
  aead.dispose();
  return { cipher, tag };
}

function open(kind: AeadKind, key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, s: Sealed, cuts: number[]) {
  const aead = createFrameAead(key, false, kind);
  const plain = new Uint8Array(s.cipher.byteLength);
  aead.start(nonce, aad);
  forPieces(s.cipher.byteLength, cuts, (from, to) => aead.update(s.cipher.subarray(from, to), plain, from));
  const authentic = aead.finishOpen(s.tag);
  aead.dispose();
  return authentic ? plain : undefined;
}

function forPieces(length: number, cuts: number[], visit: (from: number, to: number) => void): void {
  for (let from = 0, i = 0; from < length; i++) {
    const to = Math.min(length, from + cuts[i % cuts.length]!);
    visit(from, to);
    from = to;
  }
}

const bytes = (n: number) => fc.uint8Array({ minLength: n, maxLength: n });
const frame = fc.record({
  key: bytes(32),
  nonce: bytes(12),
  aad: fc.uint8Array({ maxLength: 8 }),
  plain: fc.uint8Array({ minLength: 1, maxLength: 3000, size: 'max' }),
  cuts: fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 5 }),
});

test('both AEADs seal every frame to the bytes node:crypto makes in one call, however it is cut', () => {
  fc.assert(
    fc.property(frame, ({ key, nonce, aad, plain, cuts }) => {
      const c = createCipheriv(AEAD, key, nonce, { authTagLength: TAG_BYTES });
      c.setAAD(aad);
      const cipher = Buffer.concat([c.update(plain), c.final()]);
      const tag = c.getAuthTag();
      for (const kind of AEAD_KINDS) {
        const s = seal(kind, key, nonce, aad, plain, cuts);
        assert.deepEqual(Buffer.from(s.cipher), cipher, kind);
        assert.deepEqual(Buffer.from(s.tag), tag, kind);
      }
    }),
    { numRuns: 200 },
  );
});

test('each AEAD opens what the other sealed, and refuses a frame with any byte of it, its AAD or its nonce changed', () => {
  fc.assert(
    fc.property(frame, fc.nat(), fc.integer({ min: 1, max: 255 }), ({ key, nonce, aad, plain, cuts }, at, flip) => {
      for (const [sealer, opener] of [AEAD_KINDS, [...AEAD_KINDS].reverse()] as AeadKind[][]) {
        const s = seal(sealer!, key, nonce, aad, plain, cuts);
        assert.deepEqual(open(opener!, key, nonce, aad, s, cuts), plain);
        const altered = (b: Uint8Array, i: number) => {
          const copy = new Uint8Array(b);
          copy[i % copy.byteLength]! ^= flip;
          return copy;
        };
        assert.equal(open(opener!, key, nonce, aad, { ...s, cipher: altered(s.cipher, at) }, cuts), undefined);
        assert.equal(open(opener!, key, nonce, aad, { ...s, tag: altered(s.tag, at) }, cuts), undefined);
        assert.equal(open(opener!, key, altered(nonce, at), aad, s, cuts), undefined);
        const longer = new Uint8Array([...aad, flip]);
        assert.equal(open(opener!, key, nonce, longer, s, cuts), undefined);
      }
    }),
    { numRuns: 100 },
  );
});

test('the native AEAD is the default where the addon is built, and works in place', () => {
  loadAddon(); // a missing or stale addon fails here with its reason
  const key = new Uint8Array(32).fill(7);
  const sealer = createFrameAead(key, true);
  assert.equal(sealer.kind, 'native');
  const nonce = new Uint8Array(12);
  const plain = new Uint8Array(1000).map((_, i) => i);
  const expected = seal('node:crypto', key, nonce, new Uint8Array(0), plain, [1000]);
  const buffer = new Uint8Array(plain);
  const tag = new Uint8Array(TAG_BYTES);
  sealer.start(nonce, new Uint8Array(0));
  sealer.update(buffer.subarray(0, 600), buffer, 0);
  sealer.update(buffer.subarray(600), buffer, 600);
  sealer.finishSeal(tag);
  assert.deepEqual(buffer, expected.cipher);
  assert.deepEqual(tag, expected.tag);
});

test('the native AEAD refuses calls out of order, outputs without room, overlaps and use after dispose', () => {
  const key = new Uint8Array(32);
  const nonce = new Uint8Array(12);
  const none = new Uint8Array(0);
  const sealer = createFrameAead(key, true, 'native');
  assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(4), 0), /no frame was started/);
  assert.throws(() => sealer.finishSeal(new Uint8Array(TAG_BYTES)), /no frame was started/);
  sealer.start(nonce, none);
  assert.throws(() => sealer.start(nonce, none), /started and not finished/);
  assert.throws(() => sealer.finishOpen(new Uint8Array(TAG_BYTES)), /this Gcm seals/);
  assert.throws(() => sealer.finishSeal(new Uint8Array(8)), RangeError);
  sealer.finishSeal(new Uint8Array(TAG_BYTES)); // the refusals above left the frame open
  // each bad update throws and ends the frame, so the next one starts afresh
  const buffer = new Uint8Array(64);
  for (const [input, at] of [
    [new Uint8Array(4), 3],
    [new Uint8Array(4), -1],
    [new Uint8Array(4), 0.5],
    [new Uint8Array(4), Number.POSITIVE_INFINITY],
    [new Uint8Array(4), 2 ** 64],
    [buffer.subarray(0, 32), 16], // overlapping, not the same bytes
  ] as const) {
    sealer.start(nonce, none);
    const output = input.buffer === buffer.buffer ? buffer : new Uint8Array(6);
    assert.throws(() => sealer.update(input, output, at), RangeError, `at ${at}`);
    assert.throws(() => sealer.update(new Uint8Array(1), new Uint8Array(1), 0), /no frame was started/);
  }
  sealer.start(nonce, none);
  sealer.update(buffer.subarray(8, 40), buffer, 8); // the very same bytes: in place
  sealer.finishSeal(new Uint8Array(TAG_BYTES));
  sealer.dispose();
  assert.throws(() => sealer.start(nonce, none), /disposed/);
  sealer.dispose(); // twice is harmless
  const { Gcm } = loadAddon();
  assert.throws(() => new Gcm(new Uint8Array(16), true), RangeError);
  assert.throws(() => createFrameAead(key, false, 'native').start(new Uint8Array(8), none), RangeError);
});

test('one AEAD a direction carries frame after frame, and a forged frame does not spoil the next', () => {
  const key = new Uint8Array(32).fill(9);
  const aad = new Uint8Array([1, 2, 3, 4]);
  for (const kind of AEAD_KINDS) {
    const sealer = createFrameAead(key, true, kind);
    const opener = createFrameAead(key, false, kind);
    for (let seq = 0; seq < 6; seq++) {
      const nonce = new Uint8Array(12);
      new DataView(nonce.buffer).setUint32(4, seq, true);
      const plain = new Uint8Array(100 + 37 * seq).map((_, i) => i * seq);
      const expected = seal('node:crypto', key, nonce, aad, plain, [plain.byteLength]);
      const cipher = new Uint8Array(plain.byteLength);
      const tag = new Uint8Array(TAG_BYTES);
      sealer.start(nonce, aad);
      sealer.update(plain, cipher, 0);
      sealer.finishSeal(tag);
      assert.deepEqual([cipher, tag], [expected.cipher, expected.tag], `${kind}, frame ${seq}`);
      const opened = new Uint8Array(plain.byteLength);
      const forged = seq % 2 === 1 ? new Uint8Array(tag).map((b, i) => (i === 0 ? b ^ 1 : b)) : tag;
      opener.start(nonce, aad);
      opener.update(cipher, opened, 0);
      assert.equal(opener.finishOpen(forged), seq % 2 === 0, `${kind}, frame ${seq}`);
      if (seq % 2 === 0) assert.deepEqual(opened, plain);
    }
    sealer.dispose();
    opener.dispose();
  }
});
