/**
 * Calls to one worker thread that does a gateway's CPU-heavy work off the event loop (tokenizing, parsing large
 * bodies: DESIGN I11). The thread runs one call at a time, its callers (tenants) taking turns (tenant-turns.ts): a
 * tenant with a backlog of long prompts delays another's next one by one call at most, where a queue in order of
 * arrival made it wait for the whole backlog (I11 review: victims' long prompts waited 4–7 s behind one tenant's
 * 262,144-letter words).
 *
 * Bounded: at most `queueMax` calls are held, waiting or on the thread (more are refused at once with 503), and each
 * is answered within `timeoutMs` or refused with 503. A call refused for its time while waiting is dropped unrun; one
 * refused while on the thread ends the thread, and a fresh one takes the next call: run on, it held every other
 * tenant's calls for as long as it took (a word of millions of '=' is seconds of merging). So does a thread that fails
 * or exits: the call on it fails. Each caller has at most `callerMax` calls held (more: 429 at once), so one caller
 * cannot fill the queue and turn others' calls into 503s. An error the thread's handler throws comes back with its
 * error code and param (a KvfenceError's, else internal_error).
 */
import { parentPort, Worker } from 'node:worker_threads';
import { asKvfenceError, type ErrorCode, errorMessage, isErrorCode, KvfenceError } from './errors.js';
import { TenantTurns } from './tenant-turns.js';

/** What the thread answers for one call: the handler's value, or the error it threw. */
type Reply<T> =
  | { readonly id: number; readonly value: T }
  | { readonly id: number; readonly code: string; readonly message: string; readonly param?: string };

/**
 * How refusals read to a client: `busy(queueMax)` when the queue is full, `callerBusy(callerMax)` when the caller has
 * its most waiting, `slow(timeoutMs)` when a call timed out.
 */
export interface ThreadCallWords {
  thread: string;
  busy(queueMax: number): string;
  callerBusy(callerMax: number): string;
  slow(timeoutMs: number): string;
}

interface Pending<T> {
  resolve(value: T): void;
  reject(error: KvfenceError): void;
  timer: NodeJS.Timeout;
  caller: string;
}

/** A call waiting for its turn: what to post to the thread. */
interface Waiting<Request> {
  id: number;
  request: Request;
  transfer: ArrayBuffer[];
}

export class ThreadCalls<Request, Answer> {
  /** the thread, started again for the next call after one is lost */
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending<Answer>>();
  private readonly waiting = new TenantTurns<Waiting<Request>>();
  /** the call posted to the thread and not yet answered by it */
  private onThread: number | undefined;
  /** each caller's calls still held; a caller leaves the map when its last is settled */
  private readonly callers = new Map<string, number>();
  private nextId = 0;
  private closed = false;

  constructor(
    private readonly script: URL,
    private readonly workerData: unknown,
    private readonly words: ThreadCallWords,
    private readonly timeoutMs: number,
    private readonly queueMax: number,
    private readonly callerMax: number,
  ) {
    this.worker = this.start(); // ready before the first call
  }

  /** The thread's answer to `caller`'s `request`; `transfer` lists buffers moved to the thread, not copied. */
  call(request: Request, caller: string, transfer: ArrayBuffer[] = []): Promise<Answer> {
    if (this.closed) return Promise.reject(new KvfenceError('internal_error', `${this.words.thread} is closed`));
    const held = this.callers.get(caller) ?? 0;
    if (held >= this.callerMax)
      return Promise.reject(new KvfenceError('rate_limit_exceeded', this.words.callerBusy(this.callerMax)));
    if (this.waiting.size + (this.onThread === undefined ? 0 : 1) >= this.queueMax)
      return Promise.reject(new KvfenceError('server_overloaded', this.words.busy(this.queueMax)));
    const waiting: Waiting<Request> = { id: this.nextId++, request, transfer };
    return new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.remove(caller, waiting);
        this.finish(waiting.id)?.reject(new KvfenceError('server_overloaded', this.words.slow(this.timeoutMs)));
        if (this.onThread === waiting.id) this.lose(true);
      }, this.timeoutMs);
      this.pending.set(waiting.id, { resolve, reject, timer, caller });
      this.callers.set(caller, held + 1);
      this.waiting.push(caller, waiting);
      this.post();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.waiting.drain();
    const closed = new KvfenceError('internal_error', `${this.words.thread} is closed`);
    for (const id of [...this.pending.keys()]) this.finish(id)?.reject(closed);
    const worker = this.worker;
    this.worker = undefined;
    await worker?.terminate();
  }

  private start(): Worker {
    const worker = new Worker(this.script, { workerData: this.workerData });
    worker.unref(); // never what keeps a process alive; close() ends it
    worker.on('message', (reply: Reply<Answer>) => {
      if (worker !== this.worker) return; // a lost thread's late answer
      this.onThread = undefined;
      this.settle(reply);
      this.post();
    });
    const fail = (why: string) => {
      if (worker !== this.worker) return;
      const id = this.onThread;
      if (id !== undefined) this.finish(id)?.reject(new KvfenceError('internal_error', `${this.words.thread} ${why}`));
      this.lose(id !== undefined);
    };
    worker.on('error', (error) => fail(`failed: ${error.message}`));
    worker.on('exit', () => fail('exited'));
    return worker;
  }

  /**
   * Ends the thread and whatever it runs; a fresh one takes the next call, started now when `restart` (the
   * tokenizer's takes ~0.1–0.8 s to load its vocabulary), else when that call comes: a thread that fails as it
   * starts, with no call on it, is not started again and again.
   */
  private lose(restart: boolean): void {
    const worker = this.worker;
    this.worker = restart && !this.closed ? this.start() : undefined;
    this.onThread = undefined;
    void worker?.terminate();
    this.post();
  }

  /** Posts the next call in turn when the thread is free; one it cannot post (not cloneable) is refused. */
  private post(): void {
    while (this.onThread === undefined && !this.closed) {
      const next = this.waiting.take();
      if (next === undefined) return;
      const { id, request, transfer } = next.item;
      this.worker ??= this.start();
      try {
        this.worker.postMessage({ id, request }, transfer);
        this.onThread = id;
      } catch (error) {
        this.finish(id)?.reject(asKvfenceError(error));
      }
    }
  }

  private settle(reply: Reply<Answer>): void {
    const pending = this.finish(reply.id);
    if (pending === undefined) return; // timed out already
    if ('value' in reply) pending.resolve(reply.value);
    else
      pending.reject(
        new KvfenceError(isErrorCode(reply.code) ? reply.code : 'internal_error', reply.message, reply.param),
      );
  }

  private finish(id: number): Pending<Answer> | undefined {
    const pending = this.pending.get(id);
    if (pending === undefined) return undefined;
    clearTimeout(pending.timer);
    this.pending.delete(id);
    const left = (this.callers.get(pending.caller) ?? 1) - 1;
    if (left === 0) this.callers.delete(pending.caller);
    else this.callers.set(pending.caller, left);
    return pending;
  }
}

/** The thread's side: answers each call with `handle`'s value, or with the error it threw. */
export function serveThreadCalls<Request, Answer>(name: string, handle: (request: Request) => Answer): void {
  const port = parentPort;
  if (port === null) throw new Error(`${name} runs as a worker thread`);
  port.on('message', ({ id, request }: { id: number; request: Request }) => {
    let reply: Reply<Answer>;
    try {
      reply = { id, value: handle(request) };
    } catch (error) {
      const code: ErrorCode = error instanceof KvfenceError ? error.code : 'internal_error';
      const param = error instanceof KvfenceError ? error.param : undefined;
      reply = { id, code, message: errorMessage(error), ...(param !== undefined ? { param } : {}) };
    }
    port.postMessage(reply);
  });
}
