import assert from 'node:assert/strict';
import { test } from 'node:test';
import { newNonce, type TransferTicket } from './ticket.js';
import { TransferError } from './transfer-error.js';
import { decodeFrame, encodeAbort, encodeCommit, encodeHello, encodePage } from './wire-format.js';

const ticket: TransferTicket = {
  request: 'req-ü',
  tenant: 'acme',
  nonce: newNonce(),
  epoch: 9,
  pageCount: 3,
  tokenCount: 10,
  pageSizeTokens: 4,
  pageBytes: 8,
};
const join = (parts: Uint8Array[]) => new Uint8Array(Buffer.concat(parts));
const reason = (r: string) => (e: unknown) => e instanceof TransferError && e.reason === r;

test('every frame type round-trips', () => {
  const hello = decodeFrame(join(encodeHello(ticket)));
  assert.ok(hello.type === 'HELLO');
  assert.deepEqual({ ...hello.ticket, nonce: [...hello.ticket.nonce] }, { ...ticket, nonce: [...ticket.nonce] });
  const bytes = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);
  const page = decodeFrame(
    join(encodePage(ticket, { index: 2, firstToken: 8, tokenCount: 2, checksum: 2n ** 64n - 1n }, bytes)),
  );
  assert.ok(page.type === 'PAGE' && page.page.checksum === 2n ** 64n - 1n && page.bytes.join() === bytes.join());
  const firstToken = { id: 5, logprob: -1 / 3, top: [{ id: 5, logprob: -1 / 3 }] };
  const commit = decodeFrame(
    join(
      encodeCommit(ticket, {
        pageCount: 3,
        tokenCount: 10,
        digest: new Uint8Array(32).fill(7),
        firstTokens: [firstToken, { id: 9, logprob: -2, top: [] }],
      }),
    ),
  );
  assert.ok(commit.type === 'COMMIT');
  assert.deepEqual(commit.commit.firstTokens, [firstToken, { id: 9, logprob: -2, top: [] }]);
  const abort = decodeFrame(join(encodeAbort(ticket, { code: 'context_length_exceeded', message: 'too long' })));
  assert.ok(
    abort.type === 'ABORT' && abort.abort.code === 'context_length_exceeded' && abort.binding.request === 'req-ü',
  );
});

test('a cut, padded or foreign frame is refused with a reason', () => {
  const frame = join(encodeHello(ticket));
  for (let cut = 0; cut < frame.byteLength; cut++) {
    assert.throws(() => decodeFrame(frame.subarray(0, cut)), reason('frame_truncated'));
  }
  assert.throws(() => decodeFrame(join([frame, new Uint8Array(1)])), reason('malformed_frame'));
  // 1: a COMMIT with one first token, before n; 2: XXH64 page checksums; 4: none yet
  for (const version of [1, 2, 4])
    assert.throws(() => decodeFrame(join([new Uint8Array([version]), frame.subarray(1)])), reason('malformed_frame'));
  const unknownType = frame.slice();
  unknownType[1] = 9;
  assert.throws(() => decodeFrame(unknownType), reason('malformed_frame'));
  const longMessage = decodeFrame(join(encodeAbort(ticket, { code: 'x', message: 'é'.repeat(5000) })));
  assert.ok(longMessage.type === 'ABORT' && Buffer.byteLength(longMessage.abort.message) <= 1024);
});
