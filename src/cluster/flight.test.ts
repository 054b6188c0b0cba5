import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { GeneratedToken, GenerationEnd } from '../engine/request.js';
import { NONCE_BYTES, type TransferTicket } from '../transfer/ticket.js';
import { type ErrorCode, KvfenceError } from '../util/errors.js';
import { type FlightAction, type FlightEvent, type FlightState, nextAction } from './flight.js';

const TICKET: TransferTicket = {
  request: 'req-1',
  tenant: 'acme',
  nonce: new Uint8Array(NONCE_BYTES),
  epoch: 1,
  pageCount: 1,
  tokenCount: 3,
  pageSizeTokens: 4,
  pageBytes: 64,
};
const TOKEN: GeneratedToken = { id: 7, logprob: -0.5, top: [] };
const FINISHED: GenerationEnd = { kind: 'finished', reason: 'stop', promptTokens: 3, completionTokens: 2 };
const failed = (code: ErrorCode): GenerationEnd => ({ kind: 'failed', error: new KvfenceError(code, code) });
const TRANSFER_FAILED = failed('kv_transfer_failed');

const RESERVING: FlightState = { name: 'reserving' };
const TRANSFERRING: FlightState = { name: 'transferring' };
const STREAMING: FlightState = { name: 'streaming' };
const ENDED: FlightState = { name: 'ended' };
const HELD_FOR_PREFILL: FlightState = { name: 'held', end: TRANSFER_FAILED, waitingFor: 'prefill' };
const HELD_FOR_DECODE: FlightState = { name: 'held', end: TRANSFER_FAILED, waitingFor: 'decode' };

/** An action in a few characters: what the tables below compare. */
function summary(action: FlightAction): string {
  switch (action.kind) {
    case 'start_prefill':
      return 'start';
    case 'deliver':
      return 'deliver';
    case 'move':
      return `move:${action.to.name}`;
    case 'hold':
      return `hold:${action.to.waitingFor}`;
    case 'end':
      return action.end.kind === 'failed' ? `end:${action.end.error.code}` : 'end:finished';
  }
}

test('the happy path: reserving → transferring → streaming → ended', () => {
  const start = nextAction(RESERVING, { kind: 'reserved', ticket: TICKET });
  assert.deepEqual(start, { kind: 'start_prefill', ticket: TICKET });
  const early = nextAction(TRANSFERRING, { kind: 'token', token: TOKEN, choice: 1 });
  assert.deepEqual(early, { kind: 'deliver', token: TOKEN, choice: 1 }, 'a token may arrive before the prefilled ack');
  assert.deepEqual(nextAction(TRANSFERRING, { kind: 'prefilled' }), { kind: 'move', to: STREAMING });
  assert.deepEqual(nextAction(STREAMING, { kind: 'token', token: TOKEN, choice: 1 }), {
    kind: 'deliver',
    token: TOKEN,
    choice: 1,
  });
  const end = nextAction(STREAMING, { kind: 'decode_end', end: FINISHED });
  assert.deepEqual(end, { kind: 'end', end: FINISHED });
});

test("decode's transfer failure waits for the prefill: its own error wins, else the held one ends the flight", () => {
  const hold = nextAction(TRANSFERRING, { kind: 'decode_end', end: TRANSFER_FAILED });
  assert.deepEqual(hold, { kind: 'hold', to: HELD_FOR_PREFILL });
  const invalid = failed('invalid_request_error');
  const original = nextAction(HELD_FOR_PREFILL, { kind: 'prefill_end', end: invalid });
  assert.equal(original.kind === 'end' && original.end, invalid, "a prefill's 400 stays a 400");
  const acked = nextAction(HELD_FOR_PREFILL, { kind: 'prefilled' });
  assert.equal(acked.kind === 'end' && acked.end, TRANSFER_FAILED);
  const grace = nextAction(HELD_FOR_PREFILL, { kind: 'grace_over' });
  assert.equal(grace.kind === 'end' && grace.end, TRANSFER_FAILED);
});

test("prefill's transfer failure waits for the decode: worker_unavailable wins; tokens still flow meanwhile", () => {
  const hold = nextAction(TRANSFERRING, { kind: 'prefill_end', end: TRANSFER_FAILED });
  assert.deepEqual(hold, { kind: 'hold', to: HELD_FOR_DECODE });
  assert.deepEqual(nextAction(HELD_FOR_DECODE, { kind: 'token', token: TOKEN, choice: 1 }), {
    kind: 'deliver',
    token: TOKEN,
    choice: 1,
  });
  const lost = failed('worker_unavailable');
  const better = nextAction(HELD_FOR_DECODE, { kind: 'decode_end', end: lost });
  assert.equal(better.kind === 'end' && better.end, lost);
  const grace = nextAction(HELD_FOR_DECODE, { kind: 'grace_over' });
  assert.equal(grace.kind === 'end' && grace.end, TRANSFER_FAILED);
});

test('an unexpected event ends the flight as internal_error; events after the end do nothing', () => {
  const early = nextAction(RESERVING, { kind: 'token', token: TOKEN, choice: 1 });
  assert.equal(summary(early), 'end:internal_error');
  assert.match(early.kind === 'end' && early.end.kind === 'failed' ? early.end.error.message : '', /unexpected token/);
  assert.equal(summary(nextAction(STREAMING, { kind: 'prefilled' })), 'end:internal_error');
  for (const event of [
    { kind: 'token', token: TOKEN, choice: 1 },
    { kind: 'decode_end', end: FINISHED },
  ] as const) {
    assert.deepEqual(nextAction(ENDED, event), { kind: 'move', to: ENDED });
  }
});

const EVENTS: readonly (readonly [string, FlightEvent])[] = [
  ['reserved', { kind: 'reserved', ticket: TICKET }],
  ['token', { kind: 'token', token: TOKEN, choice: 1 }],
  ['prefilled', { kind: 'prefilled' }],
  ['decode finished', { kind: 'decode_end', end: FINISHED }],
  ['decode transfer', { kind: 'decode_end', end: TRANSFER_FAILED }],
  ['decode lost', { kind: 'decode_end', end: failed('worker_unavailable') }],
  ['prefill finished', { kind: 'prefill_end', end: FINISHED }],
  ['prefill transfer', { kind: 'prefill_end', end: TRANSFER_FAILED }],
  ['prefill 400', { kind: 'prefill_end', end: failed('invalid_request_error') }],
  ['grace_over', { kind: 'grace_over' }],
];

const [I, X, W] = ['end:internal_error', 'end:kv_transfer_failed', 'end:worker_unavailable'];
const [B, F, D] = ['end:invalid_request_error', 'end:finished', 'deliver'];
/** The whole table, one row per state, columns in EVENTS' order (I internal, X transfer, W worker, B 400, F finished). */
const EXPECTED: readonly (readonly [string, FlightState, readonly string[]])[] = [
  ['reserving', RESERVING, ['start', I, I, I, X, W, I, I, I, I]],
  ['transferring', TRANSFERRING, [I, D, 'move:streaming', F, 'hold:prefill', W, I, 'hold:decode', B, I]],
  ['streaming', STREAMING, [I, D, I, F, X, W, I, I, I, I]],
  ['held for prefill', HELD_FOR_PREFILL, [I, I, X, I, I, I, X, X, B, X]],
  ['held for decode', HELD_FOR_DECODE, [I, D, I, X, X, W, I, I, I, X]],
  ['ended', ENDED, Array(EVENTS.length).fill('move:ended')],
];

test('every (state, event) pair gives exactly the tabled action, and only `end` reaches the ended state', () => {
  for (const [stateName, state, row] of EXPECTED) {
    assert.equal(row.length, EVENTS.length);
    EVENTS.forEach(([eventName, event], i) => {
      const action = nextAction(state, event);
      const where = `${stateName} + ${eventName}`;
      assert.equal(summary(action), row[i], where);
      if (state.name === 'ended') return;
      if (action.kind === 'move') assert.notEqual(action.to.name, 'ended', `${where}: only an end ends`);
      if (action.kind === 'end' && action.end.kind === 'failed' && action.end.error.code !== 'internal_error') {
        const reported = 'end' in event ? event.end : undefined;
        const held = state.name === 'held' ? state.end : undefined;
        assert.ok(action.end === reported || action.end === held, `${where}: the ending is one that was reported`);
      }
    });
  }
});
