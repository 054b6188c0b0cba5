/**
 * One reservation's side of a transfer: checks every frame against the ticket and applies it, synchronously. A frame
 * is checked and written in one call with no await between (DESIGN §6), and only while the reservation is open; the
 * first deviation fails the reservation closed and scrubs its pages. Pages must arrive in index order, each once.
 */
import { timingSafeEqual } from 'node:crypto';
import { assert } from '../util/assert.js';
import type { KvPageSink } from './kv-page-port.js';
import { type ManifestEntry, manifestDigest } from './manifest.js';
import type { PageChecksum } from './page-checksum.js';
import { pageTokenCount, type TransferBinding, type TransferTicket } from './ticket.js';
import { TransferError, type TransferFailureReason } from './transfer-error.js';
import { isTerminal, nextState, type ReceiverEvent, type ReceiverState } from './transfer-state.js';
import type { CommitBody, FirstToken, Frame } from './wire-format.js';

export type TransferOutcome =
  | {
      readonly state: 'COMMITTED';
      readonly ticket: TransferTicket;
      /** choice i's first token at i */
      readonly firstTokens: readonly FirstToken[];
      /** what was committed, echoed back to the sender as its acknowledgement */
      readonly commit: CommitBody;
    }
  | {
      readonly state: 'FAILED' | 'CANCELLED' | 'EXPIRED';
      readonly ticket: TransferTicket;
      readonly error: TransferError;
    };

export class ReceiveSession {
  private stateNow: ReceiverState = 'AWAIT_HELLO';
  private readonly entries: ManifestEntry[] = [];
  private outcomeNow: TransferOutcome | undefined;

  constructor(
    readonly ticket: TransferTicket,
    private readonly sink: KvPageSink,
    private readonly checksum: PageChecksum,
    private readonly onTerminal: (outcome: TransferOutcome) => void,
  ) {
    assert(sink.pageCount === ticket.pageCount && sink.pageBytes === ticket.pageBytes, 'sink and ticket disagree');
  }

  get state(): ReceiverState {
    return this.stateNow;
  }

  get outcome(): TransferOutcome | undefined {
    return this.outcomeNow;
  }

  /** pages accepted so far (all in order 0..n-1) */
  get pagesReceived(): number {
    return this.entries.length;
  }

  /** Applies one decoded frame. Returns false when the frame was dropped because the session is already terminal. */
  apply(frame: Frame): boolean {
    if (isTerminal(this.stateNow)) return false;
    try {
      this.checkBinding(frame.binding);
      switch (frame.type) {
        case 'HELLO':
          return this.hello(frame.ticket);
        case 'PAGE':
          return this.page(
            frame.page.index,
            frame.page.firstToken,
            frame.page.tokenCount,
            frame.page.checksum,
            frame.bytes,
          );
        case 'COMMIT':
          return this.commit(
            frame.commit.pageCount,
            frame.commit.tokenCount,
            frame.commit.digest,
            frame.commit.firstTokens,
          );
        case 'ABORT':
          this.end('ABORT', new TransferError('sender_aborted', frame.abort.message, frame.abort.code));
          return true;
      }
    } catch (error) {
      if (!(error instanceof TransferError)) throw error;
      this.fail(error);
      return true;
    }
  }

  fail(error: TransferError): void {
    this.end('REJECT', error);
  }

  /** connection lost before a terminal state: truncated transfer */
  closed(error: TransferError | undefined): void {
    this.end('CLOSE', error ?? new TransferError('connection_closed', 'connection closed before COMMIT'));
  }

  cancel(message: string): void {
    this.end('CANCEL', new TransferError('cancelled', message));
  }

  expire(reason: 'deadline_exceeded' | 'idle_timeout', message: string): void {
    this.end(reason === 'idle_timeout' ? 'IDLE' : 'DEADLINE', new TransferError(reason, message));
  }

  private hello(ticket: TransferTicket): boolean {
    this.expectState('AWAIT_HELLO', 'duplicate_hello', 'HELLO');
    const t = this.ticket;
    if (ticket.epoch !== t.epoch) throw new TransferError('wrong_epoch', `epoch ${ticket.epoch}, reserved ${t.epoch}`);
    if (
      ticket.pageCount !== t.pageCount ||
      ticket.tokenCount !== t.tokenCount ||
      ticket.pageSizeTokens !== t.pageSizeTokens ||
      ticket.pageBytes !== t.pageBytes
    ) {
      throw new TransferError(
        'ticket_mismatch',
        `HELLO declares ${ticket.pageCount} pages/${ticket.tokenCount} tokens/${ticket.pageBytes} bytes a page, ` +
          `reserved ${t.pageCount}/${t.tokenCount}/${t.pageBytes}`,
      );
    }
    this.move('HELLO_OK');
    return true;
  }

  private page(index: number, firstToken: number, tokenCount: number, checksum: bigint, bytes: Uint8Array): boolean {
    this.expectState('RECEIVING', 'unexpected_frame', 'PAGE');
    const t = this.ticket;
    const next = this.entries.length;
    if (index >= t.pageCount) throw new TransferError('page_out_of_range', `page ${index} of ${t.pageCount}`);
    if (index < next) throw new TransferError('page_duplicate', `page ${index} again (next is ${next})`);
    if (index > next) throw new TransferError('page_out_of_order', `page ${index} while page ${next} is due`);
    if (firstToken !== index * t.pageSizeTokens || tokenCount !== pageTokenCount(t, index)) {
      throw new TransferError('page_token_mismatch', `page ${index} claims tokens ${firstToken}+${tokenCount}`);
    }
    if (bytes.byteLength !== t.pageBytes) {
      throw new TransferError('page_size_mismatch', `page ${index} has ${bytes.byteLength} bytes, not ${t.pageBytes}`);
    }
    if (!this.sink.isOpen())
      throw new TransferError('reservation_closed', 'the reservation was closed under the transfer');
    // checked above, written here, in the same synchronous call. The checksum is of the bytes as they now lie in the
    // page, taken in the copy's one pass; the page counts as written only once it matches, and a mismatch fails the
    // session, whose release scrubs every page of the reservation (this one included).
    const view = this.sink.pageView(index);
    assert(view.byteLength === bytes.byteLength, 'sink page view has the ticket page size');
    if (!this.checksumMatches(this.checksum.copyOf(bytes, view), checksum)) {
      throw new TransferError('checksum_mismatch', `page ${index}`);
    }
    this.sink.markPageWritten(index, tokenCount);
    this.entries.push({ index, tokenCount, checksum });
    this.move('PAGE_OK');
    return true;
  }

  private commit(
    pageCount: number,
    tokenCount: number,
    digest: Uint8Array,
    firstTokens: readonly FirstToken[],
  ): boolean {
    this.expectState('RECEIVING', 'unexpected_frame', 'COMMIT');
    const t = this.ticket;
    if (pageCount !== t.pageCount || tokenCount !== t.tokenCount) {
      throw new TransferError('commit_mismatch', `COMMIT declares ${pageCount} pages/${tokenCount} tokens`);
    }
    if (this.entries.length !== t.pageCount) {
      throw new TransferError('page_missing', `COMMIT after ${this.entries.length} of ${t.pageCount} pages`);
    }
    const expected = manifestDigest(t, this.entries);
    if (!this.digestMatches(digest, expected)) {
      throw new TransferError('digest_mismatch', 'the manifest digest does not match the pages received');
    }
    if (!this.sink.isOpen())
      throw new TransferError('reservation_closed', 'the reservation was closed under the transfer');
    const copy: FirstToken[] = firstTokens.map((f) => ({
      id: f.id,
      logprob: f.logprob,
      top: f.top.map((x) => ({ ...x })),
    }));
    // the echo carries the digest the sender sent (equal to `expected` once checked), so its acknowledgement matches
    const commit: CommitBody = { pageCount, tokenCount, digest: digest.slice(), firstTokens: copy };
    this.outcomeNow = { state: 'COMMITTED', ticket: t, firstTokens: copy, commit };
    this.move('COMMIT_OK');
    this.onTerminal(this.outcomeNow);
    return true;
  }

  /**
   * I5: a page's bytes, as stored in the pool, have the checksum sealed where prefill computed them. Protected for the
   * mutation self-test.
   */
  protected checksumMatches(stored: bigint, sealed: bigint): boolean {
    return stored === sealed;
  }

  /** I5's last check: the COMMIT's digest is the one of the pages received. Protected for the mutation self-test. */
  protected digestMatches(digest: Uint8Array, expected: Uint8Array): boolean {
    return digest.byteLength === expected.byteLength && timingSafeEqual(digest, expected);
  }

  private checkBinding(binding: TransferBinding): void {
    const t = this.ticket;
    if (binding.request !== t.request) throw new TransferError('wrong_request', `frame for request ${binding.request}`);
    if (binding.tenant !== t.tenant) throw new TransferError('wrong_tenant', 'frame for another tenant');
    if (binding.nonce.byteLength !== t.nonce.byteLength || !timingSafeEqual(binding.nonce, t.nonce)) {
      throw new TransferError('wrong_nonce', 'frame carries another nonce');
    }
  }

  private expectState(state: ReceiverState, reason: TransferFailureReason, frame: string): void {
    if (this.stateNow !== state) throw new TransferError(reason, `${frame} in state ${this.stateNow}`);
  }

  private end(event: ReceiverEvent, error: TransferError): void {
    if (isTerminal(this.stateNow)) return;
    const state = this.move(event);
    assert(state === 'FAILED' || state === 'CANCELLED' || state === 'EXPIRED', `${event} cannot end a transfer`);
    try {
      this.sink.scrubAndRelease();
    } finally {
      // the ending is reported even if the release throws (a bug in the pool, which it reports): nobody waits forever
      this.outcomeNow = { state, ticket: this.ticket, error };
      this.onTerminal(this.outcomeNow);
    }
  }

  private move(event: ReceiverEvent): ReceiverState {
    const state = nextState(this.stateNow, event);
    assert(state !== undefined, `event ${event} in state ${this.stateNow}`); // the checks above rule it out
    this.stateNow = state;
    return state;
  }
}
