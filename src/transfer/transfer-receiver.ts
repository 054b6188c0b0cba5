/**
 * Decode side of the transfer (DESIGN §3 steps 1, 3, 4). `expect` registers a reservation and issues its ticket;
 * `accept` takes an authenticated connection, binds it to a ticket by its HELLO and feeds its frames to that ticket's
 * ReceiveSession. One connection carries one transfer; many run at once.
 *
 * Every wait is bounded: the reservation's deadline covers the whole transfer (from `expect` to COMMIT), an idle
 * timeout covers the gap between frames (and the wait for the first one). Terminal states close the connection
 * (COMMITTED: clean end; otherwise ABORT with the reason, then end) and late frames are dropped. An ended connection
 * gives the peer the idle timeout to read its last frames and close its side, and is cut off then: a peer that never
 * closes holds neither a connection slot nor the listener's close.
 */
import { assert } from '../util/assert.js';
import type { Clock } from '../util/clock.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import type { KvPageSink } from './kv-page-port.js';
import type { PageChecksum } from './page-checksum.js';
import { ReceiveSession, type TransferOutcome } from './receive-session.js';
import { newNonce, type TransferBinding, type TransferTicket, ticketProblem } from './ticket.js';
import { TransferError } from './transfer-error.js';
import type { ReceiverState } from './transfer-state.js';
import { decodeFrame, encodeAbort, encodeCommit, type Frame, frameBytesMax } from './wire-format.js';

export interface TransferReceiverOptions {
  checksum: PageChecksum;
  clock: Clock;
  /** longest gap allowed between two frames of a connection, and before its first one */
  idleTimeoutMs: number;
}

export interface ExpectOptions {
  request: string;
  tenant: string;
  /** the reservation's epoch (see pool-adapter.ts) */
  epoch: number;
  tokenCount: number;
  pageSizeTokens: number;
  sink: KvPageSink;
  /** the whole transfer must COMMIT within this many ms of `expect`, or it EXPIRES */
  deadlineMs: number;
}

/** The decode side's handle on one expected transfer. */
export interface TransferHandle {
  readonly ticket: TransferTicket;
  readonly state: ReceiverState;
  /** always resolves, exactly once, with the terminal state */
  readonly outcome: Promise<TransferOutcome>;
  /** gateway cancellation: CANCELLED, pages scrubbed; no effect once terminal */
  cancel(message: string): void;
  /** the reservation deadline hook: a decode-side deadline (e.g. the reservation's own) ends the transfer EXPIRED */
  expire(message: string): void;
}

interface Expected {
  readonly session: ReceiveSession;
  channel: FrameChannel | undefined;
  readonly cancelDeadline: () => void;
}

export class TransferReceiver {
  private readonly expected = new Map<string, Expected>();
  private readonly channels = new Set<FrameChannel>();
  /** connections this side has ended, waiting for the peer to close: each with the cut-off's cancel */
  private readonly ending = new Map<FrameChannel, () => void>();
  private closing = false;

  constructor(protected readonly options: TransferReceiverOptions) {
    assert(
      options.idleTimeoutMs > 0 && options.idleTimeoutMs <= LIMITS.transferTimeoutMsMax,
      'idle timeout out of range',
    );
  }

  /** transfers not yet terminal */
  get liveCount(): number {
    return this.expected.size;
  }

  get connectionCount(): number {
    return this.channels.size;
  }

  expect(options: ExpectOptions): TransferHandle {
    if (this.closing) throw new TransferError('receiver_closed', 'the receiver is closing');
    if (this.expected.has(options.request)) {
      throw new KvfenceError('invalid_argument', `request id ${options.request} already has a live transfer`);
    }
    const { sink } = options;
    const ticket: TransferTicket = {
      request: options.request,
      tenant: options.tenant,
      nonce: newNonce(),
      epoch: options.epoch,
      pageCount: sink.pageCount,
      tokenCount: options.tokenCount,
      pageSizeTokens: options.pageSizeTokens,
      pageBytes: sink.pageBytes,
    };
    const problem = ticketProblem(ticket);
    if (problem !== undefined) throw new KvfenceError('invalid_argument', `bad transfer ticket: ${problem}`);
    assert(options.deadlineMs > 0 && options.deadlineMs <= LIMITS.transferTimeoutMsMax, 'deadline out of range');
    let settle: (outcome: TransferOutcome) => void = () => {};
    const outcome = new Promise<TransferOutcome>((resolve) => {
      settle = resolve;
    });
    const session = this.newSession(ticket, sink, (o) => {
      this.finish(ticket.request, o);
      settle(o);
    });
    const cancelDeadline = this.options.clock.after(options.deadlineMs, () =>
      session.expire('deadline_exceeded', `no COMMIT within ${options.deadlineMs} ms`),
    );
    this.expected.set(ticket.request, { session, channel: undefined, cancelDeadline });
    return {
      ticket,
      get state() {
        return session.state;
      },
      outcome,
      cancel: (message) => session.cancel(message),
      expire: (message) => session.expire('deadline_exceeded', message),
    };
  }

  /** The session that checks one transfer's frames. Protected for tests (test/mutants/, decode-worker.test.ts). */
  protected newSession(
    ticket: TransferTicket,
    sink: KvPageSink,
    onTerminal: (outcome: TransferOutcome) => void,
  ): ReceiveSession {
    return new ReceiveSession(ticket, sink, this.options.checksum, onTerminal);
  }

  /** Takes an authenticated connection; its first frame must be the HELLO of a live ticket. */
  accept(channel: FrameChannel): void {
    if (this.closing || this.channels.size >= LIMITS.transferConnectionsMax) {
      channel.destroy(new TransferError('receiver_closed', 'the receiver takes no more connections'));
      return;
    }
    this.channels.add(channel);
    let bound: Expected | undefined;
    let refused = false;
    let cancelIdle = () => {};
    const refuse = (error: TransferError, binding: TransferBinding | undefined) => {
      refused = true;
      cancelIdle();
      this.channels.delete(channel);
      this.abortAndEnd(channel, binding, error);
    };
    const armIdle = () => {
      cancelIdle();
      cancelIdle = this.options.clock.after(this.options.idleTimeoutMs, () => {
        const message = `no frame for ${this.options.idleTimeoutMs} ms`;
        if (bound === undefined) refuse(new TransferError('idle_timeout', message), undefined);
        else bound.session.expire('idle_timeout', message);
      });
    };
    armIdle();
    // until a HELLO binds it, a frame can only be a HELLO or an ABORT: nothing larger is buffered for a stranger
    channel.limitFrames(frameBytesMax());
    channel.setHandlers({
      frame: (bytes) => {
        // a refused connection, or a late frame after the transfer ended: dropped, never applied
        if (refused || (bound !== undefined && bound.session.outcome !== undefined)) return;
        armIdle();
        let frame: Frame;
        try {
          frame = decodeFrame(bytes);
        } catch (error) {
          if (bound === undefined) refuse(asTransferError(error), undefined);
          else bound.session.fail(asTransferError(error));
          return;
        }
        if (bound === undefined) {
          bound = this.bind(channel, frame);
          if (bound === undefined) {
            refuse(new TransferError('unknown_request', 'no live ticket takes this connection'), frame.binding);
            return;
          }
          channel.limitFrames(frameBytesMax(bound.session.ticket.pageBytes));
        }
        try {
          bound.session.apply(frame);
        } catch (error) {
          bound.session.fail(asTransferError(error)); // a bug in a check must still fail closed
        }
      },
      close: (error) => {
        cancelIdle();
        this.channels.delete(channel);
        this.ending.get(channel)?.();
        this.ending.delete(channel);
        if (bound !== undefined) bound.session.closed(error);
      },
    });
  }

  /** Fails every live transfer (receiver_closed) and closes every connection. */
  close(): void {
    this.closing = true;
    for (const e of [...this.expected.values()]) {
      e.session.fail(new TransferError('receiver_closed', 'the decode worker is shutting down'));
    }
    for (const channel of [...this.channels, ...this.ending.keys()]) {
      channel.destroy(new TransferError('receiver_closed', 'shutting down'));
    }
    this.channels.clear();
    for (const cancel of this.ending.values()) cancel();
    this.ending.clear();
  }

  /** A connection binds to the ticket its first frame names; a ticket takes one connection, ever. */
  private bind(channel: FrameChannel, frame: Frame): Expected | undefined {
    const e = this.expected.get(frame.binding.request);
    if (e === undefined) return undefined;
    if (e.channel !== undefined) {
      // a second connection for a request already being received: fail closed (DESIGN §6, duplicate ids)
      e.session.fail(new TransferError('duplicate_hello', `a second connection for request ${frame.binding.request}`));
      return undefined;
    }
    // A prefill that cannot serve the request may ABORT before any HELLO; the session checks its binding (nonce
    // included) like any frame's, so the original error code reaches the gateway and a stranger's ABORT fails closed.
    if (frame.type !== 'HELLO' && frame.type !== 'ABORT') {
      e.session.fail(new TransferError('unexpected_frame', `${frame.type} before HELLO`));
      return undefined;
    }
    e.channel = channel;
    return e;
  }

  private finish(request: string, outcome: TransferOutcome): void {
    const e = this.expected.get(request);
    assert(e !== undefined && e.session.ticket === outcome.ticket, `terminal transfer ${request} is registered`);
    this.expected.delete(request);
    e.cancelDeadline();
    const channel = e.channel;
    if (channel === undefined) return;
    this.channels.delete(channel);
    if (outcome.state !== 'COMMITTED') {
      this.abortAndEnd(channel, outcome.ticket, outcome.error);
      return;
    }
    // the acknowledgement: the sender counts a transfer done only when its own COMMIT comes back
    if (!channel.closed) channel.send(encodeCommit(outcome.ticket, outcome.commit));
    this.end(channel);
  }

  private abortAndEnd(channel: FrameChannel, binding: TransferBinding | undefined, error: TransferError): void {
    if (channel.closed) return;
    if (binding !== undefined) channel.send(encodeAbort(binding, { code: error.reason, message: error.message }));
    this.end(channel);
  }

  /** Ends a connection after its queued frames; the peer has the idle timeout to close its side, then it is cut off. */
  private end(channel: FrameChannel): void {
    channel.end();
    if (channel.closed || this.ending.has(channel)) return;
    const cancel = this.options.clock.after(this.options.idleTimeoutMs, () => {
      this.ending.delete(channel);
      channel.destroy(
        new TransferError('idle_timeout', `the peer did not close within ${this.options.idleTimeoutMs} ms of the end`),
      );
    });
    this.ending.set(channel, cancel);
  }
}

function asTransferError(error: unknown): TransferError {
  return error instanceof TransferError ? error : new TransferError('unexpected_frame', errorMessage(error));
}
