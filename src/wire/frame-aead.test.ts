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
  plain: fc.uint8Array({ minLength: 1, maxLength: 3000 }),
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

test('the native AEAD refuses calls out of order, outputs without room and use after dispose', () => {
  const key = new Uint8Array(32);
  const nonce = new Uint8Array(12);
  const none = new Uint8Array(0);
  const sealer = createFrameAead(key, true, 'native');
  assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(4), 0), /no frame was started/);
  assert.throws(() => sealer.finishSeal(new Uint8Array(TAG_BYTES)), /no frame was started/);
  sealer.start(nonce, none);
  assert.throws(() => sealer.start(nonce, none), /started and not finished/);
  assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(6), 3), RangeError);
  assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(6), -1), RangeError);
  assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(6), 0.5), RangeError);
  assert.throws(() => sealer.finishOpen(new Uint8Array(TAG_BYTES)), /this Gcm seals/);
  assert.throws(() => sealer.finishSeal(new Uint8Array(8)), RangeError);
  sealer.finishSeal(new Uint8Array(TAG_BYTES));
  sealer.dispose();
  assert.throws(() => sealer.start(nonce, none), /disposed/);
  sealer.dispose(); // twice is harmless
  assert.throws(() => createFrameAead(new Uint8Array(16), true, 'native'), /32 bytes/);
  assert.throws(() => createFrameAead(key, false, 'native').start(new Uint8Array(8), none), RangeError);
});
