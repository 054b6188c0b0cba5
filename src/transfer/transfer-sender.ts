/**
 * Prefill side of the transfer (DESIGN §3 step 3): pushes HELLO · PAGE… · COMMIT over one authenticated connection,
 * waiting on backpressure, and counts the transfer done only when the receiver echoes the same COMMIT (same binding,
 * same digest). A receiver ABORT, a close without the echo, a drain or acknowledgement timeout, or the overall
 * deadline all reject with a TransferError: never a silent success. `abort` sends ABORT with a reason instead.
 * Each PAGE carries the checksum sealed where prefill computed that page (KvPageSource.checksums), so the receiver's
 * check of the bytes as they land in its pool covers the KV end to end; the COMMIT's digest is built from the same
 * checksums (sealedDigest). The sender hashes nothing on the way.
 */
import { timingSafeEqual } from 'node:crypto';
import { assert } from '../util/assert.js';
import type { Clock } from '../util/clock.js';
import { LIMITS } from '../util/limits.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import type { KvPageSource } from './kv-page-port.js';
import { type ManifestEntry, manifestDigest } from './manifest.js';
import { pageTokenCount, sameBytes, type TransferTicket, ticketProblem } from './ticket.js';
import { isTransferFailureReason, TransferError } from './transfer-error.js';
import {
  type CommitBody,
  decodeFrame,
  encodeAbort,
  encodeCommit,
  encodeHello,
  encodePage,
  type FirstToken,
} from './wire-format.js';

export interface TransferSenderOptions {
  clock: Clock;
  /** the whole push, acknowledgement included */
  deadlineMs: number;
  /** the longest wait for the peer to read (drain) or to acknowledge the COMMIT */
  idleTimeoutMs: number;
}

export interface SendResult {
  readonly pageCount: number;
  readonly bytes: number;
}

export class TransferSender {
  private failure: TransferError | undefined;
  private acknowledged = false;
  private wake: () => void = () => {};
  private started = false;
  /** after `abort` has ended the connection: the cut-off if the receiver never closes its side */
  private cancelLinger: () => void = () => {};

  constructor(
    private readonly channel: FrameChannel,
    private readonly ticket: TransferTicket,
    private readonly options: TransferSenderOptions,
  ) {
    const problem = ticketProblem(ticket);
    assert(problem === undefined, `bad ticket: ${problem}`);
    channel.setHandlers({
      frame: (bytes) => this.onFrame(bytes),
      close: (error) => {
        this.cancelLinger();
        if (!this.acknowledged)
          this.stop(error ?? new TransferError('connection_closed', 'closed before acknowledging'));
      },
    });
  }

  /** Pushes every page of `source` and the COMMIT; resolves when the receiver has committed exactly these pages. */
  async send(source: KvPageSource, firstTokens: readonly FirstToken[]): Promise<SendResult> {
    assert(!this.started, 'a TransferSender sends once');
    this.started = true;
    const t = this.ticket;
    assert(source.pageCount === t.pageCount && source.pageBytes === t.pageBytes, 'the source matches the ticket');
    assert(source.checksums.length === t.pageCount, 'the source seals one checksum a page');
    assert(firstTokens.length >= 1 && firstTokens.length <= LIMITS.choicesMax, 'a first token per choice');
    assert(
      firstTokens.every((f) => f.top.length <= LIMITS.topLogprobsMax),
      'top logprobs within bounds',
    );
    const cancelDeadline = this.options.clock.after(this.options.deadlineMs, () =>
      this.stop(
        new TransferError('deadline_exceeded', `transfer not acknowledged within ${this.options.deadlineMs} ms`),
      ),
    );
    try {
      this.check();
      await this.push(encodeHello(t));
      for (let index = 0; index < t.pageCount; index++) {
        this.check();
        const bytes = source.pageView(index);
        assert(bytes.byteLength === t.pageBytes, `source page ${index} has the ticket's size`);
        // end to end: the checksum sealed with the page, which the receiver checks against the bytes as it stores them
        const checksum = source.checksums[index]!;
        const page = { index, firstToken: index * t.pageSizeTokens, tokenCount: pageTokenCount(t, index), checksum };
        await this.push(encodePage(t, page, bytes));
      }
      this.check();
      this.commitSent = {
        pageCount: t.pageCount,
        tokenCount: t.tokenCount,
        digest: sealedDigest(t, source),
        firstTokens,
      };
      await this.push(encodeCommit(t, this.commitSent));
      await this.acknowledgement();
      return { pageCount: t.pageCount, bytes: t.pageCount * t.pageBytes };
    } catch (error) {
      if (!this.channel.closed) this.channel.destroy();
      throw error;
    } finally {
      cancelDeadline();
    }
  }

  /** The prefill gives up (cancelled, failed, rejected): ABORT with its error code, then close. */
  abort(code: string, message: string): void {
    if (this.acknowledged || this.failure !== undefined) return;
    if (!this.channel.closed) this.channel.send(encodeAbort(this.ticket, { code, message }));
    this.channel.end(); // the ABORT goes out first: no destroy here, unless the receiver never closes its side
    if (!this.channel.closed) {
      this.cancelLinger = this.options.clock.after(this.options.idleTimeoutMs, () => this.channel.destroy());
    }
    this.failure = new TransferError('sender_aborted', message, code);
    this.wake();
  }

  private commitSent: CommitBody | undefined;

  private async push(parts: Uint8Array[]): Promise<void> {
    if (!this.channel.send(parts)) await this.channel.drained(this.options.idleTimeoutMs);
  }

  private acknowledgement(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const cancel = this.options.clock.after(this.options.idleTimeoutMs, () =>
        this.stop(new TransferError('idle_timeout', `no acknowledgement within ${this.options.idleTimeoutMs} ms`)),
      );
      this.wake = () => {
        cancel();
        if (this.acknowledged) resolve();
        else reject(this.failure);
      };
      if (this.acknowledged || this.failure !== undefined) this.wake();
    });
  }

  private onFrame(bytes: Uint8Array): void {
    if (this.acknowledged || this.failure !== undefined) return;
    try {
      const frame = decodeFrame(bytes);
      const t = this.ticket;
      const b = frame.binding;
      if (b.request !== t.request || b.tenant !== t.tenant || !sameBytes(b.nonce, t.nonce)) {
        throw new TransferError('wrong_request', 'the receiver answered for another transfer');
      }
      if (frame.type === 'ABORT') {
        const reason = isTransferFailureReason(frame.abort.code) ? frame.abort.code : 'sender_aborted';
        throw new TransferError(reason, `receiver: ${frame.abort.message}`, frame.abort.code);
      }
      const sent = this.commitSent;
      if (frame.type !== 'COMMIT' || sent === undefined || !timingSafeEqual(frame.commit.digest, sent.digest)) {
        throw new TransferError('unexpected_frame', `receiver sent ${frame.type} instead of acknowledging`);
      }
      this.acknowledged = true;
      this.wake();
    } catch (error) {
      this.stop(error instanceof TransferError ? error : new TransferError('malformed_frame', String(error)));
    }
  }

  private stop(error: TransferError): void {
    if (this.acknowledged || this.failure !== undefined) return;
    this.failure = error;
    if (!this.channel.closed) this.channel.destroy(error);
    this.wake();
  }

  private check(): void {
    if (this.failure !== undefined) throw this.failure;
  }
}

/** The manifest of the checksums sealed where the KV was computed (KvPageSource.checksums), which the PAGEs carried. */
function sealedDigest(t: TransferTicket, source: KvPageSource): Uint8Array {
  const entries: ManifestEntry[] = source.checksums.map((checksum, index) => ({
    index,
    tokenCount: pageTokenCount(t, index),
    checksum,
  }));
  return manifestDigest(t, entries);
}
