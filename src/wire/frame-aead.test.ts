/**
 * The frame AEADs: AES-256-GCM's two implementations give node:crypto's bytes, AEGIS-256X4 gives the specification's
 * test vector, every frame seals to the same bytes however it is cut into calls (AEGIS holds back partial blocks), each
 * implementation opens what any of its cipher sealed, and each refuses what was altered (ciphertext, tag, AAD or nonce)
 * — checked on random frames cut into random pieces. Where the addon is built (as in `npm test`), the channel's default
 * is AEGIS-256X4.
 */
import assert from 'node:assert/strict';
import { createCipheriv } from 'node:crypto';
import { test } from 'node:test';
import fc from 'fast-check';
import { loadAddon } from '../compute/native-backend.js';
import {
  AEAD_KINDS,
  type AeadKind,
  cipherOf,
  createFrameAead,
  nonceBytesOf,
  runnableAeads,
  TAG_BYTES,
} from './frame-aead.js';

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
  aead.finishSeal(tag, cipher, cipher.byteLength);
  aead.dispose();
  return { cipher, tag };
}

function open(kind: AeadKind, key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, s: Sealed, cuts: number[]) {
  const aead = createFrameAead(key, false, kind);
  const plain = new Uint8Array(s.cipher.byteLength);
  aead.start(nonce, aad);
  forPieces(s.cipher.byteLength, cuts, (from, to) => aead.update(s.cipher.subarray(from, to), plain, from));
  const authentic = aead.finishOpen(s.tag, plain, plain.byteLength);
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

const GCMS = ['aes-256-gcm', 'aes-256-gcm/node:crypto'] as const satisfies readonly AeadKind[];
const bytes = (n: number) => fc.uint8Array({ minLength: n, maxLength: n });
const frame = (nonceBytes: number) =>
  fc.record({
    key: bytes(32),
    nonce: bytes(nonceBytes),
    aad: fc.uint8Array({ maxLength: 8 }),
    plain: fc.uint8Array({ minLength: 1, maxLength: 3000, size: 'max' }),
    cuts: fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 5 }),
  });

test('both AES-256-GCMs seal every frame to the bytes node:crypto makes in one call, however it is cut', () => {
  fc.assert(
    fc.property(frame(12), ({ key, nonce, aad, plain, cuts }) => {
      const c = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
      c.setAAD(aad);
      const cipher = Buffer.concat([c.update(plain), c.final()]);
      const tag = c.getAuthTag();
      for (const kind of GCMS) {
        const s = seal(kind, key, nonce, aad, plain, cuts);
        assert.deepEqual(Buffer.from(s.cipher), cipher, kind);
        assert.deepEqual(Buffer.from(s.tag), tag, kind);
      }
    }),
    { numRuns: 200 },
  );
});

// draft-irtf-cfrg-aegis-aead's AEGIS-256X4 test vector (as libaegis's own tests carry it)
const VECTOR = {
  key: Uint8Array.from({ length: 32 }, (_, i) => i),
  nonce: Uint8Array.from({ length: 32 }, (_, i) => 16 + i),
  aad: new Uint8Array([1, 2, 3, 4, 1, 2, 3, 4]),
  plain: Uint8Array.from({ length: 120 }, (_, i) => 5 + (i % 4)),
  cipher:
    'bec109547f8316d598b3b7d947ad4c0ef5b98e217cffa0d858ad49ae34109a95abc5b5fada820c4d6ae2fca0f5e2444e52a04a1edb7bec' +
    '71408de3e19950052194506be3ba6a4de51a15a577ea0e4c14f7539a13e751a555f48d0f49fecffb220525e60d381e2efa803b09b7164' +
    'ba59fdc66656affd51e06',
  tag: 'ec44b512d713f745547be345bcc66b6c',
};

test('AEGIS-256X4 seals the specification’s test vector, whole or cut at any point', () => {
  const { key, nonce, aad, plain } = VECTOR;
  for (const cuts of [[120], [1], [63], [64], [65], [7, 63, 64], [100, 1]]) {
    const s = seal('aegis-256x4', key, nonce, aad, plain, cuts);
    assert.equal(Buffer.from(s.cipher).toString('hex'), VECTOR.cipher, `cuts ${cuts}`);
    assert.equal(Buffer.from(s.tag).toString('hex'), VECTOR.tag, `cuts ${cuts}`);
    assert.deepEqual(open('aegis-256x4', key, nonce, aad, s, cuts), plain);
  }
});

test('AEGIS-256X4 seals every frame to the same bytes however it is cut', () => {
  fc.assert(
    fc.property(frame(32), ({ key, nonce, aad, plain, cuts }) => {
      const whole = seal('aegis-256x4', key, nonce, aad, plain, [plain.byteLength]);
      assert.deepEqual(seal('aegis-256x4', key, nonce, aad, plain, cuts), whole);
    }),
    { numRuns: 200 },
  );
});

test('each AEAD opens what its cipher sealed, and refuses a frame with any byte of it, its AAD or its nonce changed', () => {
  const pairs: [AeadKind, AeadKind][] = [
    ['aes-256-gcm', 'aes-256-gcm/node:crypto'],
    ['aes-256-gcm/node:crypto', 'aes-256-gcm'],
    ['aegis-256x4', 'aegis-256x4'],
  ];
  for (const [sealer, opener] of pairs) {
    fc.assert(
      fc.property(
        frame(nonceBytesOf(cipherOf(sealer))),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        ({ key, nonce, aad, plain, cuts }, at, flip) => {
          const s = seal(sealer, key, nonce, aad, plain, cuts);
          assert.deepEqual(open(opener, key, nonce, aad, s, cuts), plain);
          const altered = (b: Uint8Array, i: number) => {
            const copy = new Uint8Array(b);
            copy[i % copy.byteLength]! ^= flip;
            return copy;
          };
          assert.equal(open(opener, key, nonce, aad, { ...s, cipher: altered(s.cipher, at) }, cuts), undefined);
          assert.equal(open(opener, key, nonce, aad, { ...s, tag: altered(s.tag, at) }, cuts), undefined);
          assert.equal(open(opener, key, altered(nonce, at), aad, s, cuts), undefined);
          const longer = new Uint8Array([...aad, flip]);
          assert.equal(open(opener, key, nonce, longer, s, cuts), undefined);
        },
      ),
      { numRuns: 100 },
    );
  }
});

test('AEGIS-256X4 is the default where the addon is built, and works in place, cut into odd pieces', (t) => {
  // a missing or stale addon fails here with its reason
  if (!loadAddon().aegis256x4Runs) {
    assert.deepEqual(runnableAeads(), ['aes-256-gcm']);
    return t.skip('this CPU has no AES instructions: no AEGIS-256X4');
  }
  assert.deepEqual(runnableAeads(), ['aegis-256x4', 'aes-256-gcm']);
  const key = new Uint8Array(32).fill(7);
  const sealer = createFrameAead(key, true);
  assert.equal(sealer.kind, 'aegis-256x4');
  const nonce = new Uint8Array(32);
  const plain = new Uint8Array(1000).map((_, i) => i);
  const expected = seal('aegis-256x4', key, nonce, new Uint8Array(0), plain, [1000]);
  const buffer = new Uint8Array(plain);
  const tag = new Uint8Array(TAG_BYTES);
  sealer.start(nonce, new Uint8Array(0));
  forPieces(1000, [600, 33, 100], (from, to) => sealer.update(buffer.subarray(from, to), buffer, from));
  sealer.finishSeal(tag, buffer, 1000);
  assert.deepEqual(buffer, expected.cipher);
  assert.deepEqual(tag, expected.tag);
});

test('the native AEADs refuse calls out of order, outputs without room, overlaps and use after dispose', () => {
  const key = new Uint8Array(32);
  const none = new Uint8Array(0);
  for (const kind of ['aes-256-gcm', 'aegis-256x4'] as const) {
    const nonce = new Uint8Array(nonceBytesOf(cipherOf(kind)));
    const sealer = createFrameAead(key, true, kind);
    const tag = new Uint8Array(TAG_BYTES);
    assert.throws(() => sealer.update(new Uint8Array(4), new Uint8Array(4), 0), /no frame was started/);
    assert.throws(() => sealer.finishSeal(tag, none, 0), /no frame was started/);
    sealer.start(nonce, none);
    assert.throws(() => sealer.start(nonce, none), /started and not finished/);
    assert.throws(() => sealer.finishOpen(tag, none, 0), /this AEAD seals/);
    assert.throws(() => sealer.finishSeal(new Uint8Array(8), none, 0), RangeError);
    assert.throws(() => sealer.finishSeal(tag, none, 1), RangeError, 'end past the output');
    sealer.finishSeal(tag, none, 0); // the refusals above left the frame open
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
      assert.throws(() => sealer.update(input, output, at), RangeError, `${kind} at ${at}`);
      assert.throws(() => sealer.update(new Uint8Array(1), new Uint8Array(1), 0), /no frame was started/);
    }
    sealer.start(nonce, none);
    sealer.update(buffer.subarray(8, 40), buffer, 8); // the very same bytes: in place
    sealer.finishSeal(tag, buffer, 40);
    sealer.dispose();
    assert.throws(() => sealer.start(nonce, none), /disposed/);
    sealer.dispose(); // twice is harmless
    assert.throws(() => createFrameAead(key, false, kind).start(new Uint8Array(8), none), RangeError);
  }
  const { Gcm, Aegis256x4 } = loadAddon();
  assert.throws(() => new Gcm(new Uint8Array(16), true), RangeError);
  assert.throws(() => new Aegis256x4(new Uint8Array(16), true), RangeError);
});

test('no call writes outside the frame: guard bytes on both sides, the frame at an offset, cut anywhere', () => {
  const GUARD = 80; // more than a block: a tail written one block too early or late lands in it
  fc.assert(
    fc.property(
      fc.constantFrom<AeadKind>('aegis-256x4', 'aes-256-gcm'),
      fc.integer({ min: 1, max: 600 }),
      fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 5 }),
      (kind, length, cuts) => {
        const key = new Uint8Array(32).fill(length & 0xff);
        const nonce = new Uint8Array(nonceBytesOf(cipherOf(kind)));
        const plain = new Uint8Array(length).map((_, i) => i * 7);
        const expected = seal(kind, key, nonce, new Uint8Array(0), plain, [length]);
        const run = (sealing: boolean, input: Uint8Array, tag: Uint8Array) => {
          const aead = createFrameAead(key, sealing, kind);
          const out = new Uint8Array(GUARD + length + GUARD).fill(0xa5);
          aead.start(nonce, new Uint8Array(0));
          forPieces(length, cuts, (from, to) => aead.update(input.subarray(from, to), out, GUARD + from));
          if (sealing) aead.finishSeal(tag, out, GUARD + length);
          else assert.ok(aead.finishOpen(tag, out, GUARD + length));
          aead.dispose();
          assert.ok(
            out.subarray(0, GUARD).every((b) => b === 0xa5),
            'the bytes before the frame are untouched',
          );
          assert.ok(
            out.subarray(GUARD + length).every((b) => b === 0xa5),
            'the bytes after the frame are untouched',
          );
          return out.subarray(GUARD, GUARD + length);
        };
        const tag = new Uint8Array(TAG_BYTES);
        assert.deepEqual(run(true, plain, tag), expected.cipher);
        assert.deepEqual(tag, expected.tag);
        assert.deepEqual(run(false, expected.cipher, expected.tag), plain);
      },
    ),
    { numRuns: 300 },
  );
});

test('AEGIS-256X4 writes what it held back just before the next call’s offset or the finish’s end, nowhere else', () => {
  const key = new Uint8Array(32).fill(3);
  const nonce = new Uint8Array(32);
  const plain = new Uint8Array(100).map((_, i) => i);
  const expected = seal('aegis-256x4', key, nonce, new Uint8Array(0), plain, [100]);
  const sealer = createFrameAead(key, true, 'aegis-256x4');
  const tag = new Uint8Array(TAG_BYTES);
  const out = new Uint8Array(100);
  sealer.start(nonce, new Uint8Array(0));
  sealer.update(plain.subarray(0, 10), out, 0); // all 10 held back
  assert.deepEqual(out, new Uint8Array(100), 'nothing written yet');
  assert.throws(() => sealer.update(plain.subarray(10, 20), new Uint8Array(20), 5), RangeError, 'no room before at');
  sealer.start(nonce, new Uint8Array(0));
  sealer.update(plain.subarray(0, 70), out, 0); // 64 written, 6 held back
  assert.deepEqual(out.subarray(0, 64), expected.cipher.subarray(0, 64));
  assert.deepEqual(out.subarray(64), new Uint8Array(36));
  assert.throws(() => sealer.finishSeal(tag, out, 3), RangeError, 'the held-back bytes end at `end`');
  sealer.update(plain.subarray(70), out, 70); // the refused finish left the frame open
  sealer.finishSeal(tag, out, 100);
  assert.deepEqual([out, tag], [expected.cipher, expected.tag]);
  // a forged tag: the held-back tail comes out zeroed, and the frame is refused
  const opener = createFrameAead(key, false, 'aegis-256x4');
  const opened = new Uint8Array(100);
  opener.start(nonce, new Uint8Array(0));
  opener.update(expected.cipher, opened, 0);
  assert.equal(opener.finishOpen(new Uint8Array(TAG_BYTES), opened, 100), false);
  assert.deepEqual(opened.subarray(64), new Uint8Array(36));
});

test('one AEAD a direction carries frame after frame, and a forged frame does not spoil the next', () => {
  const key = new Uint8Array(32).fill(9);
  const aad = new Uint8Array([1, 2, 3, 4]);
  for (const kind of AEAD_KINDS) {
    const reference: AeadKind = kind === 'aegis-256x4' ? kind : 'aes-256-gcm/node:crypto';
    const sealer = createFrameAead(key, true, kind);
    const opener = createFrameAead(key, false, kind);
    for (let seq = 0; seq < 6; seq++) {
      const nonce = new Uint8Array(nonceBytesOf(cipherOf(kind)));
      new DataView(nonce.buffer).setUint32(nonce.byteLength - 8, seq, true);
      const plain = new Uint8Array(100 + 37 * seq).map((_, i) => i * seq);
      const expected = seal(reference, key, nonce, aad, plain, [plain.byteLength]);
      const cipher = new Uint8Array(plain.byteLength);
      const tag = new Uint8Array(TAG_BYTES);
      sealer.start(nonce, aad);
      sealer.update(plain, cipher, 0);
      sealer.finishSeal(tag, cipher, cipher.byteLength);
      assert.deepEqual([cipher, tag], [expected.cipher, expected.tag], `${kind}, frame ${seq}`);
      const opened = new Uint8Array(plain.byteLength);
      const forged = seq % 2 === 1 ? new Uint8Array(tag).map((b, i) => (i === 0 ? b ^ 1 : b)) : tag;
      opener.start(nonce, aad);
      opener.update(cipher, opened, 0);
      assert.equal(opener.finishOpen(forged, opened, opened.byteLength), seq % 2 === 0, `${kind}, frame ${seq}`);
      if (seq % 2 === 0) assert.deepEqual(opened, plain);
    }
    sealer.dispose();
    opener.dispose();
  }
});
