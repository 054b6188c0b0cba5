/**
 * The gateway's control connection to one worker: connects over the authenticated transport, waits for the worker's
 * hello, and reconnects (with a pause, forever, each try bounded by the handshake timeout) when the connection breaks —
 * a restarted worker at the same address is picked up again. When a connection breaks, `onDown` runs once so the
 * dispatcher fails that worker's requests at once (never left to hang, I6).
 *
 * A worker that stops answering without closing (a frozen process, a host cut off without FIN or RST) is found by a
 * heartbeat: the link asks for the worker's stats every quarter of `silenceMs`, and a connection that brings nothing
 * for `silenceMs` is closed, as if it had broken (its requests fail with 503 at once; the link reconnects, which a
 * worker that thaws answers). A worker busy in one long forward pass answers nothing either: it says so first
 * (long-pass.ts, stats with `busyMs`), and silence counts from the end of what it announced. The answers keep
 * `lastStats` fresh; a link that is down has none.
 *
 * Draining: a worker that got SIGTERM says `draining` on its connection, and discovery retires a worker whose address
 * left DNS. Either way the link stops taking new requests (`routable` is false) while the ones it holds run on; once it
 * holds none the dispatcher ends the connection (`endConnection`), which is the worker's cue to exit. A draining
 * connection is per connection: the restarted worker's new hello makes the link routable again.
 */

import { errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { TransferTransport } from '../wire/transport.js';
import { ControlConnection } from './control-channel.js';
import type { ControlMessage, PoolStats, WorkerHello } from './control-protocol.js';

/** the reconnect backoff's ceiling, in reconnectDelayMs (250 ms: at most 2 s between tries) */
const RECONNECT_BACKOFF_MAX = 8;

export interface WorkerLinkOptions {
  address: string;
  transport: TransferTransport;
  idleTimeoutMs: number;
  reconnectDelayMs: number;
  statsTimeoutMs: number;
  /** a connection that brings no message for this long is closed (the heartbeat asks every quarter of it) */
  silenceMs: number;
  /** a hello must pass this check before the link is used (same model, proven context, page size) */
  accept: (hello: WorkerHello) => string | undefined;
  onMessage: (link: WorkerLink, message: ControlMessage) => void;
  onDown: (link: WorkerLink, why: string) => void;
  /** the worker said `draining` on its current connection */
  onDraining: (link: WorkerLink) => void;
  log: LogSink;
}

export class WorkerLink {
  private conn: ControlConnection | undefined;
  private helloNow: WorkerHello | undefined;
  private closing = false;
  /** the current connection's worker said `draining` */
  private connDraining = false;
  /** the dispatcher retired this link (its address left discovery): close it once it holds nothing */
  retired = false;
  private retry: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  /** when the current connection last brought a message (or opened) */
  private heardAt = 0;
  /** the worker said it is in a forward pass until then (stats with busyMs): silence counts from there */
  private busyUntil = 0;
  private readonly helloWaiters: (() => void)[] = [];
  private readonly statsWaiters = new Map<number, (stats: PoolStats | undefined) => void>();
  private nextStatsId = 1;
  lastStats: PoolStats | undefined;
  private lastName: string | undefined;
  /** tries since the worker was last up, for the reconnect backoff; why the last one failed, logged when it changes */
  private failedTries = 0;
  private lastWhy: string | undefined;
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

  /** the worker's name from its last hello, kept while it is down (/health names the worker that is missing) */
  get name(): string | undefined {
    return this.lastName;
  }

  get up(): boolean {
    return this.helloNow !== undefined && this.conn?.isOpen === true;
  }

  /** the worker is shutting down or leaving: it finishes what it holds and gets nothing new */
  get draining(): boolean {
    return this.connDraining || this.retired;
  }

  /** up and not draining: new requests may go here */
  get routable(): boolean {
    return this.up && !this.draining;
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

  close(why = 'the gateway is shutting down'): void {
    this.closing = true;
    if (this.retry !== undefined) clearTimeout(this.retry);
    clearInterval(this.heartbeat);
    this.conn?.close(why);
  }

  /** A drained worker's connection ends (it holds nothing now); the link reconnects, to the worker's successor. */
  endConnection(why: string): void {
    this.conn?.close(why);
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
        this.connDraining = false;
        this.listen(conn);
      },
      (error: unknown) => this.scheduleReconnect(`connect: ${errorMessage(error)}`),
    );
  }

  /** The heartbeat of one connection: a stats question every quarter of silenceMs; silence for silenceMs closes it. */
  private listen(conn: ControlConnection): void {
    const { silenceMs } = this.options;
    const periodMs = Math.max(1, Math.floor(silenceMs / 4));
    this.heardAt = performance.now();
    this.busyUntil = 0;
    let tickAt = this.heardAt;
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      const now = performance.now();
      // a late tick: this gateway's own thread was held, and timers run before the reads that waited meanwhile, so
      // the time it was not listening is not the worker's silence (it also went unasked)
      if (now - tickAt > 2 * periodMs) this.heardAt = Math.max(this.heardAt, now - periodMs);
      tickAt = now;
      if (now - Math.max(this.heardAt, this.busyUntil) > silenceMs) {
        conn.close(`the worker sent nothing for ${silenceMs} ms (frozen, or cut off)`);
      } else if (this.up) this.send({ type: 'stats', id: this.nextStatsId++ });
    }, periodMs);
    this.heartbeat.unref();
  }

  private onMessage(conn: ControlConnection, message: ControlMessage): void {
    if (conn !== this.conn) return;
    this.heardAt = performance.now();
    // the worker's messages come in order from one thread: any message after a busy note was sent once that pass ended
    this.busyUntil = message.type === 'stats' && message.busyMs !== undefined ? this.heardAt + message.busyMs : 0;
    if (this.helloNow === undefined) {
      if (message.type !== 'hello') {
        conn.close(`expected hello, got ${message.type}`);
        return;
      }
      const refusal = this.options.accept(message.hello);
      if (refusal !== undefined) {
        if (refusal !== this.lastWhy)
          this.options.log.error(
            { worker: this.address, why: refusal },
            'worker refused: it does not fit this gateway',
          );
        this.lastWhy = refusal;
        conn.close(refusal);
        return;
      }
      this.helloNow = message.hello;
      this.failedTries = 0;
      this.lastWhy = undefined;
      this.lastName = message.hello.name;
      this.options.log.info(
        { worker: message.hello.name, address: this.address, role: message.hello.role },
        'worker connected',
      );
      for (const w of this.helloWaiters.splice(0)) w();
      return;
    }
    if (message.type === 'draining') {
      if (!this.connDraining) {
        this.connDraining = true;
        this.options.log.info({ worker: this.helloNow.name, address: this.address }, 'worker draining');
        this.options.onDraining(this);
      }
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
    clearInterval(this.heartbeat);
    this.lastStats = undefined;
    const wasUp = this.helloNow !== undefined;
    const drained = this.draining && this.inFlight === 0;
    this.helloNow = undefined;
    for (const w of this.statsWaiters.values()) w(undefined);
    this.statsWaiters.clear();
    if (wasUp) {
      if (drained) this.options.log.info({ worker: this.address, why }, 'drained worker connection closed');
      else this.options.log.warn({ worker: this.address, why }, 'worker connection lost; its requests fail');
      this.lastWhy = why; // said: the reconnect does not say it again
      this.options.onDown(this, why);
    }
    this.connDraining = false;
    this.scheduleReconnect(why);
  }

  /**
   * The next try, after reconnectDelayMs doubled for each failed try since the worker was last up (at most
   * RECONNECT_BACKOFF_MAX times it): a worker that refuses this gateway, or an address nothing answers, is not asked 4
   * times a second forever, each a full handshake and a log line. Why it failed is logged when it changes (a wrong
   * cluster secret, a refused connection), not every time.
   */
  private scheduleReconnect(why: string): void {
    if (this.closing) return;
    if (why !== this.lastWhy) {
      this.lastWhy = why;
      this.options.log.warn({ worker: this.lastName ?? this.address, why }, 'worker not reachable; trying again');
    }
    const delayMs = this.options.reconnectDelayMs * Math.min(RECONNECT_BACKOFF_MAX, 2 ** this.failedTries);
    this.failedTries++;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.connect();
    }, delayMs);
  }
}
