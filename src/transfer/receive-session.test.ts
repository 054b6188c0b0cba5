// A session's ending is reported even when releasing its pages throws (a bug in the pool, which must surface, but must
// not leave the transfer's outcome, and whoever awaits it, hanging: I6).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { onePageTicket } from '../../test/transfer/harness.js';
import type { KvPageSink } from './kv-page-port.js';
import { createPageChecksum } from './page-checksum.js';
import { ReceiveSession, type TransferOutcome } from './receive-session.js';

test('a session ends, and says so, even when releasing its pages throws', async () => {
  const sink: KvPageSink = {
    pageCount: 1,
    pageBytes: 64,
    isOpen: () => true,
    pageView: () => new Uint8Array(64),
    markPageWritten: () => {},
    scrubAndRelease: () => {
      throw new Error('the pool lost count');
    },
  };
  const ticket = onePageTicket('r', 64);
  const outcomes: TransferOutcome[] = [];
  const session = new ReceiveSession(ticket, sink, await createPageChecksum(), (o) => outcomes.push(o));
  assert.throws(() => session.cancel('the client went away'), /the pool lost count/);
  assert.equal(outcomes.length, 1);
  assert.equal(outcomes[0]!.state, 'CANCELLED');
  assert.equal(session.outcome?.state, 'CANCELLED');
});
