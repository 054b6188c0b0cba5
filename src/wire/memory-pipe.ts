/**
 * An in-memory ByteStream pair: what a TCP loopback connection does, without sockets. Writes are copied (the wire
 * owns its bytes) and delivered on a later turn of the event loop, in order; `write` returns false above the
 * high-water mark and `drain` follows once the peer has taken the bytes. Bounded: a writer that ignores backpressure
 * past LIMITS.transferPipeBytesMax breaks the pipe.
 */

import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream, ByteStreamHandlers } from './byte-stream.js';

export interface MemoryPipeOptions {
  highWaterBytes: number;
}

class MemoryEnd implements ByteStream {
  peer!: MemoryEnd;
  private handlers: ByteStreamHandlers | undefined;
  private readonly inbox: Uint8Array[] = [];
  private inFlightBytes = 0; // written by this end, not yet taken by the peer
  private needDrain = false;
  private ending = false;
  private isClosed = false;
  private closeError: Error | undefined;
  private closeReported = false;
  private scheduled = false;

  constructor(private readonly highWaterBytes: number) {}

  get closed(): boolean {
    return this.isClosed;
  }

  setHandlers(handlers: ByteStreamHandlers): void {
    this.handlers = handlers;
    this.schedule();
    if (this.isClosed) this.reportClose();
  }

  write(chunks: readonly Uint8Array[], released?: () => void): boolean {
    if (this.isClosed || this.ending) return false;
    let size = 0;
    for (const c of chunks) size += c.byteLength;
    const copy = new Uint8Array(size);
    let offset = 0;
    for (const c of chunks) {
      copy.set(c, offset);
      offset += c.byteLength;
    }
    this.inFlightBytes += size;
    if (this.inFlightBytes > LIMITS.transferPipeBytesMax) {
      this.destroy(new TransferError('backpressure_timeout', 'pipe overfull: the writer ignored backpressure'));
      return false;
    }
    this.peer.inbox.push(copy);
    this.peer.schedule();
    released?.(); // the pipe delivers its own copy
    const ok = this.inFlightBytes < this.highWaterBytes;
    if (!ok) this.needDrain = true;
    return ok;
  }

  end(): void {
    if (this.isClosed || this.ending) return;
    this.ending = true;
    this.peer.schedule(); // the close follows the last delivered byte
  }

  destroy(error?: Error): void {
    if (this.isClosed) return;
    this.closeNow(error);
    this.peer.inbox.length = 0; // whatever was in flight is lost, as on a reset connection
    this.peer.closeNow(undefined);
  }

  private schedule(): void {
    if (this.scheduled || this.handlers === undefined) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.deliver();
    });
  }

  private deliver(): void {
    while (this.handlers !== undefined && !this.isClosed && this.inbox.length > 0) {
      const chunk = this.inbox.shift()!;
      this.peer.taken(chunk.byteLength);
      this.handlers.data(chunk);
    }
    if (this.inbox.length === 0 && this.peer.ending && !this.isClosed) {
      this.closeNow(undefined);
      this.peer.closeNow(undefined);
    }
  }

  private taken(size: number): void {
    this.inFlightBytes -= size;
    assert(this.inFlightBytes >= 0, 'pipe byte accounting');
    if (this.needDrain && this.inFlightBytes < this.highWaterBytes && !this.isClosed) {
      this.needDrain = false;
      this.handlers?.drain();
    }
  }

  private closeNow(error: Error | undefined): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closeError = error;
    this.reportClose();
  }

  private reportClose(): void {
    if (this.closeReported || this.handlers === undefined) return;
    this.closeReported = true;
    const handlers = this.handlers;
    const error = this.closeError;
    queueMicrotask(() => handlers.close(error));
  }
}

export function createMemoryPipe(options: MemoryPipeOptions): [ByteStream, ByteStream] {
  assert(options.highWaterBytes >= 1 && options.highWaterBytes <= LIMITS.transferPipeBytesMax, 'high-water mark');
  const a = new MemoryEnd(options.highWaterBytes);
  const b = new MemoryEnd(options.highWaterBytes);
  a.peer = b;
  b.peer = a;
  return [a, b];
}
