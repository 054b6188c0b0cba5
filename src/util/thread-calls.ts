/**
 * Calls to one worker thread that does a gateway's CPU-heavy work off the event loop (tokenizing, parsing large
 * bodies: DESIGN I11). Bounded: at most `queueMax` calls are on the thread, queued or running (more are refused at
 * once with 503), and each is answered within `timeoutMs` or refused with 503. A call refused for its time stays on
 * the thread until the thread has answered it, so it still counts: under sustained overload the thread's backlog is
 * bounded, not only the callers who still wait. Each caller (a tenant) has at most `callerMax` calls waiting (more: 429
 * at once), so one caller cannot fill the queue and turn others' calls into 503s. An error the thread's handler throws
 * comes back with its error code and param (a KvfenceError's, else internal_error); a thread that fails or exits fails
 * every waiting call.
 */
import { parentPort, Worker } from 'node:worker_threads';
import { type ErrorCode, errorMessage, isErrorCode, KvfenceError } from './errors.js';

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

export class ThreadCalls<Request, Answer> {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending<Answer>>();
  /** calls posted to the thread and not yet answered by it, whether or not their callers still wait */
  private onThread = 0;
  /** each caller's calls still waiting; a caller leaves the map when its last is settled */
  private readonly callers = new Map<string, number>();
  private nextId = 0;
  private broken: KvfenceError | undefined;

  constructor(
    script: URL,
    workerData: unknown,
    private readonly words: ThreadCallWords,
    private readonly timeoutMs: number,
    private readonly queueMax: number,
    private readonly callerMax: number,
  ) {
    this.worker = new Worker(script, { workerData });
    this.worker.unref(); // never what keeps a process alive; close() ends it
    this.worker.on('message', (reply: Reply<Answer>) => {
      this.onThread--;
      this.settle(reply);
    });
    const fail = (why: string) => {
      this.broken = new KvfenceError('internal_error', `${words.thread} ${why}`);
      this.onThread = 0;
      for (const id of [...this.pending.keys()]) this.finish(id)?.reject(this.broken);
    };
    this.worker.on('error', (error) => fail(`failed: ${error.message}`));
    this.worker.on('exit', () => fail('exited'));
  }

  /** The thread's answer to `caller`'s `request`; `transfer` lists buffers moved to the thread, not copied. */
  call(request: Request, caller: string, transfer: ArrayBuffer[] = []): Promise<Answer> {
    if (this.broken !== undefined) return Promise.reject(this.broken);
    const held = this.callers.get(caller) ?? 0;
    if (held >= this.callerMax)
      return Promise.reject(new KvfenceError('rate_limit_exceeded', this.words.callerBusy(this.callerMax)));
    if (this.onThread >= this.queueMax)
      return Promise.reject(new KvfenceError('server_overloaded', this.words.busy(this.queueMax)));
    const id = this.nextId++;
    return new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.finish(id)?.reject(new KvfenceError('server_overloaded', this.words.slow(this.timeoutMs)));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer, caller });
      this.callers.set(caller, held + 1);
      try {
        this.worker.postMessage({ id, request }, transfer);
      } catch (error) {
        this.finish(id);
        throw error;
      }
      this.onThread++;
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
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
