/**
 * The gateway's control connection to one worker: connects over the authenticated transport, waits for the worker's
 * hello, and reconnects (with a pause, forever, each try bounded by the handshake timeout) when the connection breaks —
 * a restarted worker at the same address is picked up again. When a connection breaks, `onDown` runs once so the
 * dispatcher fails that worker's requests at once (never left to hang, I6).
 */

import { errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { TransferTransport } from '../wire/transport.js';
import { ControlConnection } from './control-channel.js';
import type { ControlMessage, PoolStats, WorkerHello } from './control-protocol.js';

export interface WorkerLinkOptions {
  address: string;
  transport: TransferTransport;
  idleTimeoutMs: number;
  reconnectDelayMs: number;
  statsTimeoutMs: number;
  /** a hello must pass this check before the link is used (same model, proven context, page size) */
  accept: (hello: WorkerHello) => string | undefined;
  onMessage: (link: WorkerLink, message: ControlMessage) => void;
  onDown: (link: WorkerLink, why: string) => void;
  log: LogSink;
}

export class WorkerLink {
  private conn: ControlConnection | undefined;
  private helloNow: WorkerHello | undefined;
  private closing = false;
  private retry: NodeJS.Timeout | undefined;
  private readonly helloWaiters: (() => void)[] = [];
  private readonly statsWaiters = new Map<number, (stats: PoolStats | undefined) => void>();
  private nextStatsId = 1;
  lastStats: PoolStats | undefined;
  /** requests of this gateway on this worker now: the routing load */
  inFlight = 0;

  constructor(private readonly options: WorkerLinkOptions) {
    this.connect();
  }

  get address(): string {
    return this.options.address;
  }

  /** the hello of the current connection; undefined while down */
  get hello(): WorkerHello | undefined {
    return this.helloNow;
  }

  get up(): boolean {
    return this.helloNow !== undefined && this.conn?.isOpen === true;
  }

  /** Resolves once up, or rejects after `timeoutMs`. */
  waitUp(timeoutMs: number): Promise<void> {
    if (this.up) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new KvfenceError('worker_unavailable', `no worker answered at ${this.address} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.helloWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  send(message: ControlMessage): boolean {
    return this.up && this.conn!.send(message);
  }

  /** The worker's pool and queue counts; undefined when down or late. */
  stats(): Promise<PoolStats | undefined> {
    if (!this.up) return Promise.resolve(undefined);
    const id = this.nextStatsId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.statsWaiters.delete(id);
        resolve(undefined);
      }, this.options.statsTimeoutMs);
      this.statsWaiters.set(id, (stats) => {
        clearTimeout(timer);
        resolve(stats);
      });
      this.send({ type: 'stats', id });
    });
  }

  close(): void {
    this.closing = true;
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.conn?.close('the gateway is shutting down');
  }

  private connect(): void {
    if (this.closing) return;
    this.options.transport.connect(this.address).then(
      (channel) => {
        if (this.closing) {
          channel.destroy();
          return;
        }
        const conn = new ControlConnection(
          channel,
          { message: (m) => this.onMessage(conn, m), close: (why) => this.onClose(conn, why) },
          this.options.idleTimeoutMs,
        );
        this.conn = conn;
      },
      (error: unknown) => this.scheduleReconnect(`connect: ${errorMessage(error)}`),
    );
  }

  private onMessage(conn: ControlConnection, message: ControlMessage): void {
    if (conn !== this.conn) return;
    if (this.helloNow === undefined) {
      if (message.type !== 'hello') {
        conn.close(`expected hello, got ${message.type}`);
        return;
      }
      const refusal = this.options.accept(message.hello);
      if (refusal !== undefined) {
        this.options.log.error({ worker: this.address, why: refusal }, 'worker refused: it does not fit this gateway');
        conn.close(refusal);
        return;
      }
      this.helloNow = message.hello;
      this.options.log.info(
        { worker: message.hello.name, address: this.address, role: message.hello.role },
        'worker connected',
      );
      for (const w of this.helloWaiters.splice(0)) w();
      return;
    }
    if (message.type === 'stats') {
      this.lastStats = message.stats ?? this.lastStats;
      this.statsWaiters.get(message.id)?.(message.stats);
      this.statsWaiters.delete(message.id);
      return;
    }
    this.options.onMessage(this, message);
  }

  private onClose(conn: ControlConnection, why: string): void {
    if (conn !== this.conn) return;
    this.conn = undefined;
    const wasUp = this.helloNow !== undefined;
    this.helloNow = undefined;
    for (const w of this.statsWaiters.values()) w(undefined);
    this.statsWaiters.clear();
    if (wasUp) {
      this.options.log.warn({ worker: this.address, why }, 'worker connection lost; its requests fail');
      this.options.onDown(this, why);
    }
    this.scheduleReconnect(why);
  }

  private scheduleReconnect(_why: string): void {
    if (this.closing) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.connect();
    }, this.options.reconnectDelayMs);
  }
}
