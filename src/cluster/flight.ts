/**
 * One request's life in the gateway's remote dispatcher (DESIGN §3), as a state and a transition table. Which workers
 * still hold the request is tracked apart from the state, so the one `end` knows exactly whom to cancel.
 *
 *   reserving ──reserved──▶ transferring ──prefilled──▶ streaming ──decode's end──▶ ended
 *       │                       │  token (decode): delivered, state kept
 *       │                       └─ kv_transfer_failed from one side ──▶ held ──the other side's report / grace──▶ ended
 *       └─ any other failure, a lost worker, a client cancel (any state) ──────────────────────────────────────▶ ended
 *
 * `held`: a transfer failure seen by one side waits briefly for the other side's report, which may carry the original
 * code (a prefill's 400 stays a 400) or the better reason (a dead decode's worker_unavailable).
 */
import type { GeneratedToken, GenerationEnd } from '../engine/request.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { KvfenceError } from '../util/errors.js';

export type FlightState =
  | { readonly name: 'reserving' }
  | { readonly name: 'transferring' }
  | { readonly name: 'streaming' }
  | { readonly name: 'held'; readonly end: GenerationEnd; readonly waitingFor: 'prefill' | 'decode' }
  | { readonly name: 'ended' };

export type FlightEvent =
  | { readonly kind: 'reserved'; readonly ticket: TransferTicket }
  | { readonly kind: 'token'; readonly token: GeneratedToken; readonly choice: number }
  | { readonly kind: 'prefilled' }
  | { readonly kind: 'decode_end'; readonly end: GenerationEnd }
  | { readonly kind: 'prefill_end'; readonly end: GenerationEnd }
  | { readonly kind: 'grace_over' };

/** What the dispatcher does for an event: move on, deliver a token, or end the flight with one ending. */
export type FlightAction =
  | { readonly kind: 'start_prefill'; readonly ticket: TransferTicket }
  | { readonly kind: 'deliver'; readonly token: GeneratedToken; readonly choice: number }
  | { readonly kind: 'move'; readonly to: FlightState }
  | { readonly kind: 'hold'; readonly to: Extract<FlightState, { name: 'held' }> }
  | { readonly kind: 'end'; readonly end: GenerationEnd };

/** The transition table: pure, so every path can be tested without a network. */
export function nextAction(state: FlightState, event: FlightEvent): FlightAction {
  switch (state.name) {
    case 'reserving':
      return event.kind === 'reserved'
        ? { kind: 'start_prefill', ticket: event.ticket }
        : event.kind === 'decode_end' && event.end.kind === 'failed' // nothing can finish before it is reserved
          ? { kind: 'end', end: event.end }
          : unexpected(event);
    case 'transferring':
      switch (event.kind) {
        case 'token':
          return { kind: 'deliver', token: event.token, choice: event.choice };
        case 'prefilled':
          return { kind: 'move', to: { name: 'streaming' } };
        case 'prefill_end':
          if (event.end.kind !== 'failed') return unexpected(event);
          return isTransferFailure(event.end)
            ? { kind: 'hold', to: { name: 'held', end: event.end, waitingFor: 'decode' } }
            : { kind: 'end', end: event.end };
        case 'decode_end':
          return isTransferFailure(event.end)
            ? { kind: 'hold', to: { name: 'held', end: event.end, waitingFor: 'prefill' } }
            : { kind: 'end', end: event.end };
        default:
          return unexpected(event);
      }
    case 'streaming':
      if (event.kind === 'token') return { kind: 'deliver', token: event.token, choice: event.choice };
      if (event.kind === 'decode_end') return { kind: 'end', end: event.end };
      return unexpected(event);
    case 'held':
      return heldAction(state, event);
    case 'ended':
      return { kind: 'move', to: state }; // late messages of an ended flight are dropped
  }
}

function heldAction(held: Extract<FlightState, { name: 'held' }>, event: FlightEvent): FlightAction {
  const better = (end: GenerationEnd) => (end.kind === 'failed' && !isTransferFailure(end) ? end : held.end);
  if (event.kind === 'grace_over') return { kind: 'end', end: held.end };
  if (held.waitingFor === 'prefill') {
    // decode's failure stands unless the prefill's own report carries the original code
    if (event.kind === 'prefill_end') return { kind: 'end', end: better(event.end) };
    if (event.kind === 'prefilled') return { kind: 'end', end: held.end };
    return unexpected(event);
  }
  if (event.kind === 'token') return { kind: 'deliver', token: event.token, choice: event.choice };
  if (event.kind === 'decode_end') return { kind: 'end', end: better(event.end) };
  return unexpected(event);
}

function isTransferFailure(end: GenerationEnd): boolean {
  return end.kind === 'failed' && end.error.code === 'kv_transfer_failed';
}

/** A message the protocol does not allow here ends the flight as an internal error (fail closed). */
function unexpected(event: FlightEvent): FlightAction {
  return { kind: 'end', end: { kind: 'failed', error: protocolError(event.kind) } };
}

function protocolError(what: string): KvfenceError {
  return new KvfenceError('internal_error', `a worker sent an unexpected ${what}`);
}
