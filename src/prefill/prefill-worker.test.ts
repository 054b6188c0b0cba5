// The prefill worker's last I3 check, where it reads a finished job's pages to send them: a table that fails it is an
// isolation incident like one the engine finds, and the decode side is told at once (ABORT), rather than a transfer
// error that leaves the decode reservation to its deadline.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { costlyConstraint, whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { forwardFor } from '../../test/helpers/models.js';
import { expectTransfer, makeWorld, SECRET } from '../../test/transfer/harness.js';
import { PrefillEngine } from '../engine/prefill-engine.js';
import type { GenerationEnd, IsolationIncident } from '../engine/request.js';
import { grammarCacheFor, type OutputConstraint } from '../structured/grammar-cache.js';
import { createPageChecksum } from '../transfer/page-checksum.js';
import { TransferError } from '../transfer/transfer-error.js';
import { systemClock } from '../util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../wire/memory-transport.js';
import { PrefillWorker } from './prefill-worker.js';

/** Hands its finished jobs over with their table at a stale epoch, as a bug that lost track of a page would. */
class StaleTableEngine extends PrefillEngine {
  override step(nowMs: number) {
    const events = super.step(nowMs);
    for (const e of events) {
      if (e.kind === 'prefilled') e.prefilled.table.epochs[0] = (e.prefilled.table.epochs[0]! + 1) >>> 0;
    }
    return events;
  }
}

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

/** A prefill worker over `Engine` (a pool of 64 pages of the transfer harness's size) and a decode side to send to. */
async function startWorker(Engine: typeof PrefillEngine) {
  const pageSize = 4; // the transfer harness's page size
  const forward = forwardFor(model, 64, pageSize);
  const transport = new MemoryTransport({
    network: new MemoryNetwork(),
    secret: SECRET,
    clock: systemClock,
    handshakeTimeoutMs: 2_000,
    highWaterBytes: 1 << 20,
  });
  const checksum = await createPageChecksum();
  const decode = await makeWorld(transport, checksum, { pageBytes: forward.pool.layout.bytesPerPage });
  const incidents: IsolationIncident[] = [];
  const settings = config({ prefillChunkTokens: 64, stepTokenBudget: 64, grammars: grammarCacheFor(model.tokenizer) });
  const worker = new PrefillWorker({
    engine: new Engine(settings, forward, undefined),
    pool: forward.pool,
    prefixCache: undefined,
    transport,
    checksum,
    clock: systemClock,
    transferDeadlineMs: 10_000,
    idleTimeoutMs: 2_000,
    onIncident: (incident) => incidents.push(incident),
    log: quiet,
  });
  return { forward, decode, incidents, worker };
}

test('a job whose pages fail the I3 check at send time: an incident, the job failed, the decode side told at once', async () => {
  const { decode, incidents, worker } = await startWorker(StaleTableEngine);
  try {
    const job = request('r1', 'tenant-a', 10, 4);
    const { handle } = expectTransfer(decode, job.id, job.promptTokens.length);
    const ended = new Promise<GenerationEnd>((resolve) =>
      worker.job(job, handle.ticket, decode.listener.address, { origin: {}, prefilled: () => {}, end: resolve }),
    );
    const end = await ended;
    assert.equal(end.kind, 'failed');
    assert.equal(end.kind === 'failed' ? end.error.code : undefined, 'kv_isolation_violation');
    assert.equal(incidents.length, 1);
    assert.equal(incidents[0]!.request, 'r1');
    assert.equal(incidents[0]!.tenant, 'tenant-a');
    assert.match(incidents[0]!.violation.reason, /stale epoch/);
    // the decode side heard it from the prefill worker (not from its own deadline), with the reason's code
    const outcome = await handle.outcome;
    assert.equal(outcome.state, 'FAILED');
    assert.ok(outcome.state === 'FAILED' && outcome.error instanceof TransferError);
    assert.equal(outcome.error.reason, 'sender_aborted');
    assert.equal(outcome.error.peerCode, 'kv_isolation_violation');
    assert.equal(decode.pool.freeCount, decode.pool.pageCount, 'the decode reservation was scrubbed and freed');
  } finally {
    await worker.close();
    await decode.close();
  }
});

test('a job’s grammar is built off the step loop before it is computed; a cancel or a close finds a job waiting', async () => {
  const { forward, decode, worker } = await startWorker(PrefillEngine);
  const { inlineMs } = costlyConstraint('warm');
  const [built, cancelled, closed] = ['built', 'cancelled', 'closed'].map((tag) => costlyConstraint(tag).constraint);
  const ends = new Map<string, GenerationEnd>();
  const job = (id: string, constraint: OutputConstraint, prefilled = () => {}) => {
    const { handle } = expectTransfer(decode, id, 10);
    const link = { origin: worker, prefilled, end: (end: GenerationEnd) => ends.set(id, end) };
    worker.job({ ...request(id, 'tenant-a', 10, 4), constraint }, handle.ticket, decode.listener.address, link);
    return handle;
  };
  try {
    const { longestGapMs } = await whileTicking(() => new Promise<void>((resolve) => job('built', built, resolve)));
    assert.ok(
      longestGapMs < inlineMs / 2,
      `the loop stalled ${longestGapMs.toFixed(0)} ms (a build: ${inlineMs.toFixed(0)} ms)`,
    );
    job('cancelled', cancelled);
    worker.cancel('cancelled');
    job('closed', closed);
    assert.equal(worker.stats().waiting + worker.stats().running, 0, 'nothing computed while a grammar is built');
  } finally {
    await worker.close();
    await decode.close();
  }
  assert.deepEqual([...ends.keys()], ['closed'], 'a cancelled job hears nothing; a close ends the one waiting');
  assert.equal(ends.get('closed')?.kind, 'failed');
  assert.equal(forward.pool.checkConservation().free, 64);
});
