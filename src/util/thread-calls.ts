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
 *
 * A thread whose handler works in steps (util/steps.ts: a `yield` is a pause) can be `shared`: up to `onThreadMax`
 * calls are on it at once, at most one of each caller, and it runs them in turns of SLICE_MS, so a call of seconds
 * (16 million spaces at a 131,072 context) delays another caller's by a slice a turn instead of its whole length.
 * A call refused for its time is then cancelled on the thread, which goes on with the others; a thread that does not
 * confirm the cancel within `timeoutMs` more is ended as above (not sooner: a fresh thread confirms nothing until it
 * has loaded, ~0.1–0.8 s for a 128k vocabulary, longer on a busy machine).
 */
import { parentPort, Worker } from 'node:worker_threads';
import { asKvfenceError, type ErrorCode, errorMessage, isErrorCode, KvfenceError } from './errors.js';
import type { Steps } from './steps.js';
import { TenantTurns } from './tenant-turns.js';

/** How long a shared thread works on one call before it turns to the next */
const SLICE_MS = 10;

/** What the thread answers for one call: the handler's value, the error it threw, or that it dropped it (a cancel). */
type Reply<T> =
  | { readonly id: number; readonly value: T }
  | { readonly id: number; readonly code: string; readonly message: string; readonly param?: string }
  | { readonly id: number; readonly cancelled: true };

/** What the thread is sent: a call, or the cancel of one (shared threads only). */
type Message<Request> = { readonly id: number; readonly request: Request } | { readonly cancel: number };

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
  /** the calls posted to the thread and not yet answered by it, with their callers */
  private readonly onThread = new Map<number, string>();
  /** the most calls on the thread at once: 1, or onThreadMax for a shared thread */
  private readonly onThreadMax: number;
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
    private readonly shared?: { onThreadMax: number },
  ) {
    this.onThreadMax = shared?.onThreadMax ?? 1;
    this.worker = this.start(); // ready before the first call
  }

  /** The thread's answer to `caller`'s `request`; `transfer` lists buffers moved to the thread, not copied. */
  call(request: Request, caller: string, transfer: ArrayBuffer[] = []): Promise<Answer> {
    if (this.closed) return Promise.reject(new KvfenceError('internal_error', `${this.words.thread} is closed`));
    const held = this.callers.get(caller) ?? 0;
    if (held >= this.callerMax)
      return Promise.reject(new KvfenceError('rate_limit_exceeded', this.words.callerBusy(this.callerMax)));
    if (this.waiting.size + this.onThread.size >= this.queueMax)
      return Promise.reject(new KvfenceError('server_overloaded', this.words.busy(this.queueMax)));
    const waiting: Waiting<Request> = { id: this.nextId++, request, transfer };
    return new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.remove(caller, waiting);
        this.finish(waiting.id)?.reject(new KvfenceError('server_overloaded', this.words.slow(this.timeoutMs)));
        if (this.onThread.has(waiting.id)) this.cancel(waiting.id);
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
      this.onThread.delete(reply.id);
      this.settle(reply);
      this.post();
    });
    const fail = (why: string) => {
      if (worker !== this.worker) return;
      const ids = [...this.onThread.keys()];
      for (const id of ids) this.finish(id)?.reject(new KvfenceError('internal_error', `${this.words.thread} ${why}`));
      this.lose(ids.length > 0);
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
    // calls still on it fail: the one refused for its time already has; others (a shared thread's) fail now
    for (const id of this.onThread.keys())
      this.finish(id)?.reject(new KvfenceError('server_overloaded', `${this.words.thread} was restarted`));
    this.onThread.clear();
    void worker?.terminate();
    this.post();
  }

  /**
   * A call on the thread refused for its time: a shared thread is told to drop it, and ended if it has not confirmed
   * within `timeoutMs`; any other is ended at once, with the call it runs.
   */
  private cancel(id: number): void {
    const worker = this.worker;
    if (this.shared === undefined || worker === undefined) {
      this.lose(true);
      return;
    }
    worker.postMessage({ cancel: id } satisfies Message<Request>);
    setTimeout(() => {
      if (this.worker === worker && this.onThread.has(id)) this.lose(true);
    }, this.timeoutMs).unref();
  }

  /**
   * Posts the next calls in turn while the thread has room, a shared thread's of callers with none on it; one it
   * cannot post (not cloneable) is refused.
   */
  private post(): void {
    const onThread = new Set(this.onThread.values());
    while (this.onThread.size < this.onThreadMax && !this.closed) {
      const next = this.waiting.take((caller) => !onThread.has(caller));
      if (next === undefined) return;
      const { id, request, transfer } = next.item;
      this.worker ??= this.start();
      try {
        this.worker.postMessage({ id, request } satisfies Message<Request>, transfer);
        this.onThread.set(id, next.tenant);
        onThread.add(next.tenant);
      } catch (error) {
        this.finish(id)?.reject(asKvfenceError(error));
      }
    }
  }

  private settle(reply: Reply<Answer>): void {
    const pending = this.finish(reply.id);
    if (pending === undefined) return; // timed out already (a cancel's confirmation comes for such a call only)
    if ('cancelled' in reply) return;
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

/** The answer for a call whose handler threw `error`: its code and param (a KvfenceError's), else internal_error. */
function failure<Answer>(id: number, error: unknown): Reply<Answer> {
  const code: ErrorCode = error instanceof KvfenceError ? error.code : 'internal_error';
  const param = error instanceof KvfenceError ? error.param : undefined;
  return { id, code, message: errorMessage(error), ...(param !== undefined ? { param } : {}) };
}

/** The thread's side: answers each call with `handle`'s value, or with the error it threw. */
export function serveThreadCalls<Request, Answer>(name: string, handle: (request: Request) => Answer): void {
  serveTurns<Request, Answer>(name, (request) => () => ({ done: true, value: handle(request) }));
}

/**
 * The thread's side for work in steps: each call's steps run in turns of SLICE_MS with the other calls on the thread
 * (a shared thread's: see ThreadCalls), the next turn after the thread has read its messages (new calls, cancels); the
 * answer is the steps' value, or the error they threw.
 */
export function serveThreadSteps<Request, Answer>(name: string, handle: (request: Request) => Steps<Answer>): void {
  serveTurns<Request, Answer>(name, (request) => {
    const steps = handle(request);
    return () => steps.next();
  });
}

/** A call under way: each `step` goes on with it, to a pause or to its answer. */
interface Turn<Answer> {
  id: number;
  step(): IteratorResult<void, Answer>;
}

function serveTurns<Request, Answer>(name: string, start: (request: Request) => Turn<Answer>['step']): void {
  const port = parentPort;
  if (port === null) throw new Error(`${name} runs as a worker thread`);
  const reply = (message: Reply<Answer>) => port.postMessage(message);
  /** calls under way, in the order of their next turn */
  const turns: Turn<Answer>[] = [];
  let scheduled = false;
  const runTurn = () => {
    scheduled = false;
    const call = turns.shift();
    if (call === undefined) return;
    const until = performance.now() + SLICE_MS;
    try {
      for (;;) {
        const next = call.step();
        if (next.done) {
          reply({ id: call.id, value: next.value });
          break;
        }
        if (performance.now() >= until) {
          turns.push(call);
          break;
        }
      }
    } catch (error) {
      reply(failure(call.id, error));
    }
    schedule();
  };
  const schedule = () => {
    if (scheduled || turns.length === 0) return;
    scheduled = true;
    setImmediate(runTurn);
  };
  port.on('message', (message: Message<Request>) => {
    if ('cancel' in message) {
      const at = turns.findIndex((call) => call.id === message.cancel);
      if (at >= 0) turns.splice(at, 1);
      reply({ id: message.cancel, cancelled: true }); // answered already, or dropped now
      return;
    }
    try {
      turns.push({ id: message.id, step: start(message.request) });
      schedule();
    } catch (error) {
      reply(failure(message.id, error));
    }
  });
}
