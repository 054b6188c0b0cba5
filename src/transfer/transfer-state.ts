/**
 * The receiver's states and transitions, one per reservation; spec/ (Promela) uses the same names.
 *
 *                 HELLO ok            PAGE ok (index == next)
 *   AWAIT_HELLO ───────────▶ RECEIVING ◀──────┐
 *        │                      │  └──────────┘
 *        │                      │ COMMIT ok (all pages, digest) ──▶ COMMITTED
 *        │ any deviation, ABORT, CLOSE ──────────────────────────▶ FAILED
 *        │ CANCEL ───────────────────────────────────────────────▶ CANCELLED
 *        └ DEADLINE / IDLE ──────────────────────────────────────▶ EXPIRED
 *
 * Terminal states never change again; a frame that arrives in one is dropped, never applied.
 */
export const RECEIVER_STATES = ['AWAIT_HELLO', 'RECEIVING', 'COMMITTED', 'FAILED', 'CANCELLED', 'EXPIRED'] as const;
export type ReceiverState = (typeof RECEIVER_STATES)[number];
export type TerminalState = Exclude<ReceiverState, 'AWAIT_HELLO' | 'RECEIVING'>;

/** What can happen to a reservation's transfer. `*_OK` events passed every check; `REJECT` is any failed check. */
export type ReceiverEvent =
  | 'HELLO_OK'
  | 'PAGE_OK'
  | 'COMMIT_OK'
  | 'REJECT'
  | 'ABORT'
  | 'CLOSE'
  | 'CANCEL'
  | 'DEADLINE'
  | 'IDLE';

const TRANSITIONS: Readonly<Record<'AWAIT_HELLO' | 'RECEIVING', Partial<Record<ReceiverEvent, ReceiverState>>>> = {
  AWAIT_HELLO: {
    HELLO_OK: 'RECEIVING',
    REJECT: 'FAILED',
    ABORT: 'FAILED',
    CLOSE: 'FAILED',
    CANCEL: 'CANCELLED',
    DEADLINE: 'EXPIRED',
    IDLE: 'EXPIRED',
  },
  RECEIVING: {
    PAGE_OK: 'RECEIVING',
    COMMIT_OK: 'COMMITTED',
    REJECT: 'FAILED',
    ABORT: 'FAILED',
    CLOSE: 'FAILED',
    CANCEL: 'CANCELLED',
    DEADLINE: 'EXPIRED',
    IDLE: 'EXPIRED',
  },
};

export function isTerminal(state: ReceiverState): state is TerminalState {
  return state !== 'AWAIT_HELLO' && state !== 'RECEIVING';
}

/**
 * The next state; undefined when the event is not allowed (the caller fails closed). Terminal states absorb every
 * event: a late frame changes nothing.
 */
export function nextState(state: ReceiverState, event: ReceiverEvent): ReceiverState | undefined {
  if (isTerminal(state)) return state;
  return TRANSITIONS[state][event];
}
