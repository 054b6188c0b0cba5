/**
 * Each PAGE carries the checksum sealed where prefill computed that page (docs/protocol.md, Hashes), and the receiver
 * checks it against the bytes as it stores them. A page whose bytes changed between the computation and the wire (a
 * staging-buffer mix-up in the sender: another request's KV) fails its PAGE check with checksum_mismatch; the page is
 * never counted written, and the reservation, that page included, is scrubbed and released.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { KvPageSource } from '../../src/transfer/kv-page-port.js';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { ChecksumUncheckedReceiver } from '../mutants/seeded-faults.js';
import { makeWorld, randomSource, SECRET, startTransfer, type World } from './harness.js';

const TOKENS = 22; // 6 pages of 4 tokens
const MIXED_PAGE = 2;

let checksum: PageChecksum;
let world: World;
let mutantWorld: World;

before(async () => {
  checksum = await createPageChecksum();
  const transport = () =>
    new MemoryTransport({
      secret: SECRET,
      clock: systemClock,
      handshakeTimeoutMs: 2_000,
      network: new MemoryNetwork(),
      highWaterBytes: 1 << 20,
    });
  world = await makeWorld(transport(), checksum, { pageBytes: 1024 });
  // the mutation self-test's receiver (test/mutants/seeded-faults.ts): it skips the page checksum comparison
  mutantWorld = await makeWorld(transport(), checksum, { pageBytes: 1024, Receiver: ChecksumUncheckedReceiver });
});

after(async () => {
  await world.close();
  await mutantWorld.close();
});

/** This request's sealed pages, except that page MIXED_PAGE reads another request's KV at send time. */
function mixedSource(pageCount: number, pageBytes: number): KvPageSource & { all: Uint8Array } {
  const own = randomSource(pageCount, pageBytes, checksum);
  const other = randomSource(pageCount, pageBytes, checksum);
  return { ...own, pageView: (i) => (i === MIXED_PAGE ? other.pageView(i) : own.pageView(i)) };
}

test('a page changed after it was sealed fails its PAGE check (checksum_mismatch) and is scrubbed', async () => {
  const clean = startTransfer(world, checksum, 'req-clean', TOKENS);
  const mixed = startTransfer(world, checksum, 'req-mixed', TOKENS, (c) => c, { source: mixedSource });
  await assert.rejects(mixed.sent, (e) => e instanceof TransferError && e.reason === 'checksum_mismatch');
  const outcome = await mixed.outcome;
  assert.ok(outcome.state === 'FAILED' && outcome.error.reason === 'checksum_mismatch', JSON.stringify(outcome));
  assert.match(outcome.error.message, new RegExp(`page ${MIXED_PAGE}`));
  assert.deepEqual(mixed.sink.writes, [0, 1], 'only the pages before the mixed one count as written');
  assert.ok(mixed.sink.released, 'the reservation was scrubbed and released');
  await clean.sent;
  assert.equal((await clean.outcome).state, 'COMMITTED', 'an unmixed source commits');
  assert.deepEqual(clean.sink.bytes(), clean.source.all);
  clean.sink.close();
  // the mixed page's bytes reached its pool page before the check failed: the release scrubbed them
  world.pool.checkClean();
  assert.equal(world.pool.freeCount, world.pool.pageCount);
});

test('mutation hook checksumUnchecked: the same mixed transfer commits, and the sender counts it acknowledged', async () => {
  const mixed = startTransfer(mutantWorld, checksum, 'req-mixed', TOKENS, (c) => c, { source: mixedSource });
  await mixed.sent;
  assert.equal((await mixed.outcome).state, 'COMMITTED');
  assert.notDeepEqual(mixed.sink.bytes(), mixed.source.all, "another request's page landed");
  mixed.sink.close();
});
