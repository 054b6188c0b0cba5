/**
 * The COMMIT's digest is end to end (docs/protocol.md, Hashes): built from the checksums sealed where prefill computed
 * the KV, while each PAGE's checksum covers only the hop. A page whose bytes changed between the computation and the
 * wire (a staging-buffer mix-up in the sender: another request's KV, sent with a correct hop checksum) passes every
 * per-page check and fails the transfer at COMMIT with digest_mismatch; the reservation is scrubbed and released.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { KvPageSource } from '../../src/transfer/kv-page-port.js';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { DigestUncheckedReceiver } from '../mutants/seeded-faults.js';
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
  // the mutation self-test's receiver (test/mutants/seeded-faults.ts): it skips the digest comparison
  mutantWorld = await makeWorld(transport(), checksum, { pageBytes: 1024, Receiver: DigestUncheckedReceiver });
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

test('a page changed after it was sealed passes its PAGE check and fails the COMMIT (digest_mismatch)', async () => {
  const clean = startTransfer(world, checksum, 'req-clean', TOKENS);
  const mixed = startTransfer(world, checksum, 'req-mixed', TOKENS, (c) => c, { source: mixedSource });
  await assert.rejects(mixed.sent, (e) => e instanceof TransferError && e.reason === 'digest_mismatch');
  const outcome = await mixed.outcome;
  assert.ok(outcome.state === 'FAILED' && outcome.error.reason === 'digest_mismatch', JSON.stringify(outcome));
  assert.deepEqual(mixed.sink.writes, [0, 1, 2, 3, 4, 5], 'every page passed its hop checksum');
  assert.ok(mixed.sink.released, 'the reservation was scrubbed and released');
  await clean.sent;
  assert.equal((await clean.outcome).state, 'COMMITTED', 'an unmixed source commits');
  assert.deepEqual(clean.sink.bytes(), clean.source.all);
  clean.sink.close();
  world.pool.checkClean();
  assert.equal(world.pool.freeCount, world.pool.pageCount);
});

test('mutation hook digestUnchecked: the same mixed transfer commits, and the sender counts it acknowledged', async () => {
  const mixed = startTransfer(mutantWorld, checksum, 'req-mixed', TOKENS, (c) => c, { source: mixedSource });
  await mixed.sent;
  assert.equal((await mixed.outcome).state, 'COMMITTED');
  assert.notDeepEqual(mixed.sink.bytes(), mixed.source.all, "another request's page landed");
  mixed.sink.close();
});
