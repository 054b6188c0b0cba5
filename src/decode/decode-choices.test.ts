// The decode worker admits through the engine's shared rule (Engine.admitFrom), so it pauses and resumes as the
// colocated engine does: here with n > 1, whose choices may end one by one without their request ending. The KV
// arrives through a stand-in receiver that commits what a PrefillEngine computed, as a verified transfer would.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { config, model, request } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { BatchRunner } from '../engine/batch-runner.js';
import { choiceRequest } from '../engine/choice-group.js';
import { Engine } from '../engine/engine.js';
import { PrefillEngine, type Prefilled } from '../engine/prefill-engine.js';
import type { GenerationEnd, GenerationRequest } from '../engine/request.js';
import type { TransferOutcome } from '../transfer/receive-session.js';
import { TransferError } from '../transfer/transfer-error.js';
import type { ExpectOptions, TransferHandle, TransferReceiver } from '../transfer/transfer-receiver.js';
import { DecodeWorker } from './decode-worker.js';

const PAGE = 16;

/** Expected transfers, committed when the test says so. */
class CommittingReceiver {
  readonly pending = new Map<
    string,
    { options: ExpectOptions; handle: TransferHandle; end: (o: TransferOutcome) => void }
  >();

  expect(options: ExpectOptions): TransferHandle {
    const { request, tenant, epoch, tokenCount, pageSizeTokens, sink } = options;
    const ticket = { request, tenant, nonce: new Uint8Array(16), epoch, tokenCount, pageSizeTokens, ...sink };
    let end!: (outcome: TransferOutcome) => void;
    const outcome = new Promise<TransferOutcome>((resolve) => {
      end = resolve;
    });
    const stop = (message: string) => {
      if (!this.pending.delete(request)) return;
      sink.scrubAndRelease();
      end({ state: 'CANCELLED', ticket, error: new TransferError('cancelled', message) });
    };
    const handle = { ticket, state: 'AWAIT_HELLO' as const, outcome, cancel: stop, expire: stop };
    this.pending.set(request, { options, handle, end });
    return handle;
  }

  /** The prompt's KV, as `prefilled` computed it, into the transfer's pages; then COMMITTED with its first tokens. */
  commit(id: string, prefilled: Prefilled, from: Uint16Array, valuesPerPage: number): void {
    const expected = this.pending.get(id);
    assert.ok(expected !== undefined, `${id} is transferring`);
    const { sink, tokenCount } = expected.options;
    for (let i = 0; i < sink.pageCount; i++) {
      const page = prefilled.table.pages[i]!;
      const values = from.subarray(page * valuesPerPage, (page + 1) * valuesPerPage);
      sink.pageView(i).set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
      sink.markPageWritten(i, Math.min(PAGE, tokenCount - i * PAGE));
    }
    this.pending.delete(id);
    const digest = new Uint8Array(32);
    const firstTokens = prefilled.firsts;
    const commit = { pageCount: sink.pageCount, tokenCount, digest, firstTokens };
    expected.end({ state: 'COMMITTED', ticket: expected.handle.ticket, firstTokens, commit });
  }

  close(): void {}
}

function seeded(id: string, tenant: string, promptLength: number, maxTokens: number, n: number): GenerationRequest {
  const r = request(id, tenant, promptLength, maxTokens);
  return { ...r, sampling: { temperature: 1.1, topK: 0, topP: 0.95, seed: 41 }, ...(n > 1 ? { choices: n } : {}) };
}

/** (token, logprob) pairs of choice `c` of `r` run alone in a colocated engine */
function alone(r: GenerationRequest, c: number): number[] {
  const engine = new Engine(config(), forwardFor(model, 64, PAGE));
  engine.submit({ ...choiceRequest(r, c), choices: 1 }, 0);
  const got: number[] = [];
  while (engine.hasWork) for (const e of engine.step(0)) if (e.kind === 'token') got.push(e.token.id, e.token.logprob);
  return got;
}

test('decode worker: a paused choice resumes in the slot its sibling frees, not when some request ends', async () => {
  const forward = forwardFor(model, 96, PAGE);
  const log = { info: () => {}, warn: () => {}, error: () => {} };
  const engine = new Engine(config({ runningMax: 2 }), forward);
  const runner = new BatchRunner({ engine, onIncident: () => {}, log, now: () => 0 });
  const receiver = new CommittingReceiver();
  const worker = new DecodeWorker({
    runner,
    pool: forward.pool,
    receiver: receiver as unknown as TransferReceiver,
    provenContext: 256,
    vocabSize: model.config.vocabSize,
    transferDeadlineMs: 60_000,
    runningMax: 2,
    waitingMax: 16,
    queueTimeoutMs: 60_000,
    log,
  });
  const prefillForward = forwardFor(model, 64, PAGE);
  const prefill = new PrefillEngine(config(), prefillForward, undefined);
  const tokens = new Map<string, number[][]>();
  const ends = new Map<string, GenerationEnd[]>();
  const reserve = (r: GenerationRequest) =>
    worker.reserve(r, {
      origin: worker,
      reserved: () => {},
      token: (t, c) => {
        const per = tokens.get(r.id) ?? tokens.set(r.id, []).get(r.id)!;
        per[c] = [...(per[c] ?? []), t.id, t.logprob];
      },
      end: (end) => ends.set(r.id, [...(ends.get(r.id) ?? []), end]),
    });
  const commit = (r: GenerationRequest) => {
    prefill.submit(r, 0);
    let prefilled: Prefilled | undefined;
    for (let i = 0; prefilled === undefined && i < 100; i++)
      for (const e of prefill.step(0)) if (e.kind === 'prefilled') prefilled = e.prefilled;
    assert.ok(prefilled !== undefined, `${r.id} prefilled`);
    receiver.commit(r.id, prefilled, prefillForward.pool.arena, prefillForward.pool.layout.valuesPerPage);
    prefilled.release();
  };
  const turn = () => new Promise((resolve) => setImmediate(resolve));

  const g = seeded('g', 'a', 20, 20, 2);
  const b = seeded('b', 'b', 12, 150, 1);
  reserve(g);
  commit(g);
  for (let i = 0; i < 3; i++) await turn();
  reserve(b); // g's two choices hold both slots: one pauses for b
  assert.equal(engine.pausedRequests().length, 1, 'one of g pauses');
  commit(b);
  // g's running choice reaches its 20 tokens long before b's 150, and frees its slot for its paused sibling
  const oneChoiceDone = () => (tokens.get('g') ?? []).some((t) => t?.length === 40);
  for (let i = 0; i < 500 && !oneChoiceDone(); i++) await turn();
  for (let i = 0; i < 3; i++) await turn();
  const bTokens = (tokens.get('b')?.[0]?.length ?? 0) / 2;
  assert.deepEqual(engine.pausedRequests(), [], `g's paused choice waits with a slot free (b at ${bTokens} of 150)`);
  for (let i = 0; i < 2000 && ends.size < 2; i++) await turn();
  assert.deepEqual([...ends.entries()].map(([id, e]) => [id, e.map((x) => x.kind)]).sort(), [
    ['b', ['finished']],
    ['g', ['finished']],
  ]);
  for (const [r, n] of [[g, 2] as const, [b, 1] as const])
    for (let c = 0; c < n; c++) assert.deepEqual(tokens.get(r.id)?.[c], alone(r, c), `${r.id} choice ${c} as alone`);
  assert.equal(forward.pool.checkConservation().free, 96);
  await worker.close();
});
