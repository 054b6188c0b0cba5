/**
 * A streamed response's writes, with backpressure (issue 12). Node buffers whatever a socket cannot send yet, without
 * end: a client that stops reading would make the server hold every chunk of its stream. The writer bounds that:
 *   - more than `bufferedBytesMax` bytes waiting to be sent, or
 *   - the socket over its high-water mark (`write` returned false) and not drained within `drainTimeoutMs`,
 * cuts the stream: nothing more is written, the connection is reset, and `onCut` tells the run, which cancels the
 * request as if the client had gone away. After `end`, unsent bytes are held to the same deadline, so a client that
 * never reads its last chunks does not keep the connection either.
 */
import type { ServerResponse } from 'node:http';
import { Socket } from 'node:net';

export interface StreamBounds {
  /** bytes one stream may have waiting in the server, unsent (beyond its first chunk, see `write`) */
  bufferedBytesMax: number;
  /** the longest a stream may stay over its socket's high-water mark without draining */
  drainTimeoutMs: number;
}

export type StreamCut = { reason: 'buffer_full' | 'not_draining'; bufferedBytes: number };

export class StreamWriter {
  private timer: NodeJS.Timeout | undefined;
  private cut = false;
  /** the byte bound, raised once by the first chunk's size: it can carry the echoed prompt (bounded by the body) */
  private bytesMax: number;
  private wroteFirst = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly bounds: StreamBounds,
    private readonly onCut: (cut: StreamCut) => void,
  ) {
    this.bytesMax = bounds.bufferedBytesMax;
    const settle = () => this.stopTimer();
    res.on('drain', settle);
    res.on('finish', settle);
    res.on('close', settle);
  }

  write(chunk: string): void {
    if (!this.open()) return;
    if (!this.wroteFirst) {
      this.wroteFirst = true;
      this.bytesMax += Buffer.byteLength(chunk);
    }
    // checked before writing, so what waits never exceeds the bound by more than one chunk
    const waiting = this.res.writableLength;
    if (waiting > this.bytesMax) this.cutOff('buffer_full', waiting);
    else if (!this.res.write(chunk)) this.startTimer();
  }

  end(chunk?: string): void {
    if (!this.open()) return;
    this.res.end(chunk);
    if (this.res.writableLength > 0) this.startTimer();
  }

  private open(): boolean {
    return !this.cut && !this.res.writableEnded && !this.res.destroyed;
  }

  private startTimer(): void {
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.cutOff('not_draining', this.res.writableLength);
    }, this.bounds.drainTimeoutMs);
  }

  private stopTimer(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private cutOff(reason: StreamCut['reason'], bufferedBytes: number): void {
    if (this.cut) return;
    this.cut = true;
    this.stopTimer();
    // A reset, not a FIN: the kernel drops what the client never read instead of keeping it for an orphaned socket.
    const socket = this.res.socket;
    if (socket instanceof Socket) socket.resetAndDestroy();
    else this.res.destroy();
    this.onCut({ reason, bufferedBytes });
  }
}
