// A transfer's sink that throws as it scrubs (a bug) costs the decode worker neither pages nor the other requests.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { costlyConstraint, whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { forwardFor } from '../../test/helpers/models.js';
import { BatchRunner } from '../engine/batch-runner.js';
import { Engine } from '../engine/engine.js';
import type { GenerationEnd } from '../engine/request.js';
import { grammarCacheFor, type OutputConstraint } from '../structured/grammar-cache.js';
import type { KvPageSink } from '../transfer/kv-page-port.js';
import { createPageChecksum } from '../transfer/page-checksum.js';
import type { ReceiveSession, TransferOutcome } from '../transfer/receive-session.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { TransferReceiver } from '../transfer/transfer-receiver.js';
import { systemClock } from '../util/clock.js';
import { type DecodeRequestLink, DecodeWorker } from './decode-worker.js';

/** Its sinks throw on scrubAndRelease, before releasing anything. */
class ThrowingSinkReceiver extends TransferReceiver {
  protected override newSession(
    ticket: TransferTicket,
    sink: KvPageSink,
    onTerminal: (outcome: TransferOutcome) => void,
  ): ReceiveSession {
    const throwing: KvPageSink = {
      pageCount: sink.pageCount,
      pageBytes: sink.pageBytes,
      isOpen: () => sink.isOpen(),
      pageView: (index) => sink.pageView(index),
      markPageWritten: (index, tokenCount) => sink.markPageWritten(index, tokenCount),
      scrubAndRelease: () => {
        throw new Error('sink bug');
      },
    };
    return super.newSession(ticket, throwing, onTerminal);
  }
}

async function startWorker(Receiver: typeof TransferReceiver = ThrowingSinkReceiver) {
  const forward = forwardFor(model, 64, 16);
  const errors: string[] = [];
  const log = { info: () => {}, warn: () => {}, error: (_: object, message: string) => errors.push(message) };
  const engine = new Engine(config({ grammars: grammarCacheFor(model.tokenizer) }), forward);
  const runner = new BatchRunner({ engine, onIncident: () => {}, log, now: Date.now });
  const receiver = new Receiver({
    checksum: await createPageChecksum(),
    clock: systemClock,
    idleTimeoutMs: 5_000,
  });
  const worker = new DecodeWorker({
    runner,
    pool: forward.pool,
    receiver,
    provenContext: 256,
    vocabSize: model.config.vocabSize,
    transferDeadlineMs: 5_000,
    runningMax: 8,
    waitingMax: 16,
    queueTimeoutMs: 5_000,
    log,
  });
  const ends = new Map<string, GenerationEnd[]>();
  const reserve = (id: string, tenant: string, constraint?: OutputConstraint, reserved = () => {}) => {
    const link: DecodeRequestLink = {
      origin: worker,
      reserved,
      token: () => {},
      end: (end) => ends.set(id, [...(ends.get(id) ?? []), end]),
    };
    worker.reserve({ ...request(id, tenant, 40, 8), ...(constraint !== undefined ? { constraint } : {}) }, link);
  };
  return { worker, pool: forward.pool, errors, ends, reserve };
}

test('a cancel while transferring gives back every page though the sink throws; the bug is logged', async () => {
  const { worker, pool, errors, reserve } = await startWorker();
  reserve('r1', 'a');
  assert.equal(worker.stats().running, 1, 'the request is transferring');
  worker.cancel('r1');
  assert.deepEqual(pool.checkConservation(), { free: 64, reserved: 0, active: 0 });
  assert.deepEqual(worker.stats().tenants, []);
  assert.deepEqual(errors, ['cancelling a KV transfer failed']);
  await worker.close();
});

test('a close ends every transferring request once, pages back, though the first one’s sink throws', async () => {
  const { worker, pool, ends, reserve } = await startWorker();
  reserve('r1', 'a');
  reserve('r2', 'b');
  await worker.close();
  for (const id of ['r1', 'r2']) {
    assert.deepEqual(
      ends.get(id)?.map((e) => e.kind),
      ['failed'],
      `${id} ended once, failed`,
    );
  }
  assert.deepEqual(pool.checkConservation(), { free: 64, reserved: 0, active: 0 });
});

test('a request’s grammar is built off the batch’s loop before its pages are reserved; cancels and a close find it', async () => {
  const { worker, pool, ends, reserve } = await startWorker(TransferReceiver);
  const { inlineMs } = costlyConstraint('warm');
  const [built, cancelled, dropped, closed] = ['built', 'cancelled', 'dropped', 'closed'].map(
    (tag) => costlyConstraint(tag).constraint,
  );
  try {
    const { longestGapMs } = await whileTicking(
      () => new Promise<void>((resolve) => reserve('built', 'a', built, resolve)),
    );
    assert.ok(
      longestGapMs < inlineMs / 2,
      `the loop stalled ${longestGapMs.toFixed(0)} ms (a build: ${inlineMs.toFixed(0)} ms)`,
    );
    assert.equal(worker.stats().running, 1, 'reserved once built: transferring');
    worker.cancel('built');
    reserve('cancelled', 'a', cancelled);
    reserve('dropped', 'b', dropped);
    assert.equal(worker.stats().running + worker.stats().waiting, 0, 'nothing reserved while a grammar is built');
    worker.cancel('cancelled');
    worker.cancelAll(worker);
    reserve('closed', 'c', closed);
  } finally {
    await worker.close();
  }
  assert.deepEqual([...ends.keys()], ['closed'], 'cancelled requests hear nothing; a close ends the one waiting');
  assert.equal(ends.get('closed')?.[0]?.kind, 'failed');
  assert.deepEqual(pool.checkConservation(), { free: 64, reserved: 0, active: 0 });
});
