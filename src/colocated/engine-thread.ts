/**
 * The colocated worker on its own thread: `kvfence serve`'s InferenceWorker. The step loop (forward passes, sampling,
 * the KV pool) runs on engine-thread-main.ts's thread, so a model step never delays HTTP parsing, SSE writes or
 * tokenization on the gateway's event loop, and they never delay a step (DESIGN I11). Requests go over as data; each
 * step's tokens and endings come back in one message, in the engine's order.
 *
 * Every request in flight hears exactly one ending (I6): its own, a refusal (the thread's submit threw; it arrives as
 * the request's failed ending, nothing reserved), or, when the thread dies, `worker_unavailable` at once. Questions
 * (stats, page maps) and the start and close are each bounded by a timeout.
 */
import { Worker } from 'node:worker_threads';
import { endFromWire, errorFromWire } from '../cluster/control-protocol.js';
import type { GenerationSink, InferenceWorker, WorkerPageMap, WorkerStats } from '../engine/inference-worker.js';
import type { GenerationRequest, IsolationIncident } from '../engine/request.js';
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type {
  EngineThreadData,
  EngineThreadEvent,
  EngineThreadStart,
  FromEngineThread,
  ToEngineThread,
} from './engine-thread-protocol.js';

export interface EngineThreadOptions {
  data: EngineThreadData;
  log: LogSink;
  /** loading the model and proving the pool's capacity (a large file takes a while) */
  startTimeoutMs: number;
  /** stats and page maps */
  askTimeoutMs: number;
  /** the thread failed or exited on its own: the server cannot serve any more */
  onDown?: (why: string) => void;
}

const CLOSE_TIMEOUT_MS = 10_000;

/** Drops this file's listeners (never all: the Worker's own internal ones keep its port running). */
function forget(thread: Worker): void {
  for (const event of ['message', 'error', 'exit']) thread.removeAllListeners(event);
}

interface Ask<T> {
  resolve(value: T | undefined): void;
  timer: NodeJS.Timeout;
}

export class EngineThread implements InferenceWorker {
  private readonly sinks = new Map<string, GenerationSink>();
  private readonly incidentListeners: ((incident: IsolationIncident) => void)[] = [];
  private readonly statsAsks = new Map<number, Ask<WorkerStats>>();
  private refreshing: Promise<void> | undefined;
  private readonly mapAsks = new Map<number, Ask<WorkerPageMap[]>>();
  private nextAsk = 1;
  private lastStats: WorkerStats;
  private down: string | undefined;
  private closing = false;
  private onClosed: (() => void) | undefined;

  private constructor(
    private readonly thread: Worker,
    private readonly options: EngineThreadOptions,
    readonly provenContext: number,
    readonly pageSize: number,
  ) {
    const pages = options.data.settings.pageCount;
    this.lastStats = {
      running: 0,
      waiting: 0,
      pagesTotal: pages,
      pagesFree: pages,
      tenants: new Map(),
      reservations: 0,
    };
    thread.on('message', (message: FromEngineThread) => this.onMessage(message));
    thread.on('error', (error) => this.fail(`failed: ${error.message}`));
    thread.on('exit', (code) => this.fail(`exited (code ${code})`));
  }

  /** Starts the thread and waits until its pool is ready; `lines` are what it has to tell the operator. */
  static async start(options: EngineThreadOptions): Promise<{ worker: EngineThread; lines: string[] }> {
    const thread = new Worker(new URL('./engine-thread-main.js', import.meta.url), { workerData: options.data });
    let timer: NodeJS.Timeout | undefined;
    try {
      const ready = await new Promise<Extract<EngineThreadStart, { type: 'ready' }>>((resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(new KvfenceError('internal_error', `the engine did not start within ${options.startTimeoutMs} ms`)),
          options.startTimeoutMs,
        );
        thread.once('message', (message: EngineThreadStart) => {
          if (message.type === 'ready') resolve(message);
          else reject(errorFromWire(message.error));
        });
        thread.once('error', reject);
        thread.once('exit', (code) =>
          reject(new KvfenceError('internal_error', `the engine thread exited (code ${code})`)),
        );
      });
      forget(thread);
      return { worker: new EngineThread(thread, options, ready.provenContext, ready.pageSize), lines: ready.lines };
    } catch (error) {
      forget(thread);
      await thread.terminate();
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  submit(request: GenerationRequest, sink: GenerationSink): void {
    if (this.closing) throw new KvfenceError('server_overloaded', 'the server is shutting down');
    if (this.down !== undefined) throw new KvfenceError('worker_unavailable', `the engine ${this.down}`);
    assert(!this.sinks.has(request.id), `request ${request.id} is already in flight`);
    this.sinks.set(request.id, sink);
    this.post({ type: 'submit', request });
  }

  cancel(requestId: string): void {
    if (!this.sinks.delete(requestId)) return;
    this.post({ type: 'cancel', id: requestId });
  }

  endChoice(requestId: string, choice: number): void {
    if (this.sinks.has(requestId)) this.post({ type: 'end_choice', id: requestId, choice });
  }

  /** As of the last `refresh`: /health and /metrics refresh first. */
  stats(): WorkerStats {
    return this.lastStats;
  }

  /**
   * One question to the engine thread at a time, however many callers: /health and /metrics are public, and each ask
   * is a message between two engine steps (as the remote dispatcher's refresh does).
   */
  refresh(): Promise<void> {
    this.refreshing ??= this.ask(this.statsAsks, (ask) => ({ type: 'stats', ask })).then((stats) => {
      if (stats !== undefined) this.lastStats = stats;
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  async pageMaps(): Promise<WorkerPageMap[]> {
    const maps = await this.ask(this.mapAsks, (ask) => ({ type: 'page_maps', ask }));
    return maps ?? [{ name: 'colocated', role: 'colocated', up: false, report: undefined }];
  }

  onIncident(listener: (incident: IsolationIncident) => void): void {
    this.incidentListeners.push(listener);
  }

  /** Stops stepping (requests still queue; queue deadlines are checked once it resumes): maintenance and tests. */
  pause(): void {
    this.post({ type: 'pause' });
  }

  resume(): void {
    this.post({ type: 'resume' });
  }

  /** Fails what is in flight (503), waits for the thread to say so (bounded), then ends it. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.down === undefined) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.onClosed = resolve;
        timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
        this.post({ type: 'close' });
      });
      clearTimeout(timer);
    }
    forget(this.thread);
    await this.thread.terminate();
    this.endAll(new KvfenceError('server_overloaded', 'the server is shutting down'));
    this.settleAsks();
  }

  private post(message: ToEngineThread): void {
    if (this.down === undefined) this.thread.postMessage(message);
  }

  private onMessage(message: FromEngineThread): void {
    switch (message.type) {
      case 'events':
        for (const event of message.events) this.deliver(event);
        break;
      case 'stats':
        this.settle(this.statsAsks, message.ask, message.stats);
        break;
      case 'page_maps':
        this.settle(this.mapAsks, message.ask, message.maps);
        break;
      case 'closed':
        this.onClosed?.();
        break;
    }
  }

  private deliver(event: EngineThreadEvent): void {
    switch (event.kind) {
      case 'token':
        this.sinks.get(event.id)?.onToken(event.token, event.choice);
        break;
      case 'end': {
        const sink = this.sinks.get(event.id);
        this.sinks.delete(event.id);
        sink?.onEnd(endFromWire(event.end));
        break;
      }
      case 'incident':
        for (const listener of this.incidentListeners) listener(event.incident);
        break;
    }
  }

  /** The thread is gone: every request in flight ends now (I6), and nothing new is taken. */
  private fail(why: string): void {
    if (this.down !== undefined || this.closing) return;
    this.down = why;
    this.options.log.error({ why }, 'the engine thread stopped; its requests failed');
    this.endAll(new KvfenceError('worker_unavailable', `the engine ${why}; retry later`));
    this.settleAsks();
    this.options.onDown?.(why);
  }

  private endAll(error: KvfenceError): void {
    const sinks = [...this.sinks.values()];
    this.sinks.clear();
    for (const sink of sinks) sink.onEnd({ kind: 'failed', error });
  }

  private ask<T>(asks: Map<number, Ask<T>>, message: (ask: number) => ToEngineThread): Promise<T | undefined> {
    if (this.down !== undefined || this.closing) return Promise.resolve(undefined);
    const id = this.nextAsk++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.settle(asks, id, undefined), this.options.askTimeoutMs);
      asks.set(id, { resolve, timer });
      this.post(message(id));
    });
  }

  private settle<T>(asks: Map<number, Ask<T>>, id: number, value: T | undefined): void {
    const ask = asks.get(id);
    if (ask === undefined) return; // answered after its timeout
    asks.delete(id);
    clearTimeout(ask.timer);
    ask.resolve(value);
  }

  private settleAsks(): void {
    for (const id of [...this.statsAsks.keys()]) this.settle(this.statsAsks, id, undefined);
    for (const id of [...this.mapAsks.keys()]) this.settle(this.mapAsks, id, undefined);
  }
}
