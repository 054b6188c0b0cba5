/**
 * One control connection: control messages (control-protocol.ts) over an authenticated FrameChannel made by the
 * transfer layer's transport (same cluster-secret handshake and encrypted, authenticated frames as KV transfers,
 * DESIGN I10, I12: prompt token ids never cross in clear). A message
 * that fails to parse, or a peer that stops reading for `idleTimeoutMs` while we have more to say, closes the
 * connection: the owner fails that connection's requests.
 */

import { errorMessage } from '../util/errors.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import { type ControlMessage, decodeControl, encodeControl } from './control-protocol.js';

export interface ControlHandlers {
  message(message: ControlMessage): void;
  /** exactly once; `why` says what ended it */
  close(why: string): void;
}

export class ControlConnection {
  private closedWhy: string | undefined;
  private draining = false;

  constructor(
    private readonly channel: FrameChannel,
    private readonly handlers: ControlHandlers,
    private readonly idleTimeoutMs: number,
  ) {
    channel.setHandlers({
      frame: (bytes) => {
        if (this.closedWhy !== undefined) return;
        let message: ControlMessage;
        try {
          message = decodeControl(bytes);
        } catch (error) {
          this.close(`bad control message: ${errorMessage(error)}`);
          return;
        }
        this.handlers.message(message);
      },
      close: (error) => this.closed(error === undefined ? 'the peer closed the connection' : error.message),
    });
  }

  get isOpen(): boolean {
    return this.closedWhy === undefined;
  }

  /** Sends one message; false when the connection is closed (the message is dropped: the peer is gone). */
  send(message: ControlMessage): boolean {
    if (this.closedWhy !== undefined || this.channel.closed) return false;
    const ok = this.channel.send([encodeControl(message)]);
    if (!ok && !this.draining) {
      // bounded: a peer that reads nothing for idleTimeoutMs is cut off, not buffered for forever
      this.draining = true;
      this.channel.drained(this.idleTimeoutMs).then(
        () => {
          this.draining = false;
        },
        (error: unknown) => this.close(`the peer stopped reading: ${errorMessage(error)}`),
      );
    }
    return true;
  }

  close(why: string): void {
    if (this.closedWhy !== undefined) return;
    this.closedWhy = why;
    this.channel.destroy();
    this.handlers.close(why);
  }

  private closed(why: string): void {
    if (this.closedWhy !== undefined) return;
    this.closedWhy = why;
    this.handlers.close(why);
  }
}
