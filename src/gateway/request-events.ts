/**
 * A request's events (tokens, its ending, a client disconnect or stalled stream) as an awaitable queue, so a route handler reads as
 * straight-line code. Every wait has a deadline (I6): past it the request is cancelled and answered with a timeout.
 */

import type { GenerationSink } from '../engine/inference-worker.js';
import type { GeneratedToken, GenerationEnd } from '../engine/request.js';
import { assert } from '../util/assert.js';
import type { StreamCut } from './stream-writer.js';

export type RequestEvent =
  | { kind: 'token'; token: GeneratedToken; choice: number; atMs: number }
  | { kind: 'end'; end: GenerationEnd }
  | { kind: 'disconnected' }
  /** the client stopped reading its stream and the writer closed the connection */
  | { kind: 'stalled'; cut: StreamCut }
  | { kind: 'deadline' };

export class RequestEvents implements GenerationSink {
  private readonly queue: RequestEvent[] = [];
  private waiter: ((event: RequestEvent) => void) | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(deadlineMs: number) {
    this.timer = setTimeout(() => this.push({ kind: 'deadline' }), deadlineMs);
  }

  onToken(token: GeneratedToken, choice: number): void {
    this.push({ kind: 'token', token, choice, atMs: performance.now() });
  }

  onEnd(end: GenerationEnd): void {
    this.push({ kind: 'end', end });
  }

  push(event: RequestEvent): void {
    const waiter = this.waiter;
    if (waiter !== undefined) {
      this.waiter = undefined;
      waiter(event);
    } else {
      this.queue.push(event);
    }
  }

  next(): Promise<RequestEvent> {
    const event = this.queue.shift();
    if (event !== undefined) return Promise.resolve(event);
    assert(this.waiter === undefined, 'one reader at a time');
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  dispose(): void {
    clearTimeout(this.timer);
  }
}
