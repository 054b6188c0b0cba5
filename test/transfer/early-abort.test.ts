/** A prefill that cannot serve a request ABORTs before HELLO: the decode side keeps the original error code. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { encodeAbort } from '../../src/transfer/wire-format.js';
import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { expectTransfer, makeWorld, PAGE_SIZE_TOKENS, SECRET, type World } from './harness.js';

let checksum: PageChecksum;
let world: World;

before(async () => {
  checksum = await createPageChecksum();
  const transport = new MemoryTransport({
    secret: SECRET,
    handshakeTimeoutMs: 2_000,
    clock: systemClock,
    network: new MemoryNetwork(),
    highWaterBytes: 1 << 20,
  });
  world = await makeWorld(transport, checksum);
});
after(() => world.close());

function expect(request: string) {
  return expectTransfer(world, request, 2 * PAGE_SIZE_TOKENS, { deadlineMs: 5_000 });
}

test('an ABORT as the first frame ends the transfer with the sender’s own code, pages scrubbed', async () => {
  const { sink, handle } = expect('early-abort');
  const channel = await world.transport.connect(world.listener.address);
  channel.send(encodeAbort(handle.ticket, { code: 'context_length_exceeded', message: 'prompt too long for prefill' }));
  const outcome = await handle.outcome;
  assert.ok(outcome.state === 'FAILED');
  assert.equal(outcome.error.reason, 'sender_aborted');
  assert.equal(outcome.error.peerCode, 'context_length_exceeded');
  assert.deepEqual(sink.writes, []);
  assert.ok(sink.released);
  channel.destroy();
});

test('a first-frame ABORT with the wrong nonce fails closed, not as the sender’s abort', async () => {
  const { sink, handle } = expect('forged-abort');
  const channel = await world.transport.connect(world.listener.address);
  const forged = { ...handle.ticket, nonce: new Uint8Array(handle.ticket.nonce.length) };
  channel.send(encodeAbort(forged, { code: 'context_length_exceeded', message: 'forged' }));
  const outcome = await handle.outcome;
  assert.ok(outcome.state === 'FAILED');
  assert.notEqual(outcome.error.reason, 'sender_aborted');
  assert.deepEqual(sink.writes, []);
  assert.ok(sink.released);
  channel.destroy();
});
