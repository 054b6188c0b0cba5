/**
 * Tokenization off the event loop: one long prompt must not freeze every tenant's requests (DESIGN I11). A text of
 * up to INLINE_CHARS is encoded inline (about a millisecond); a longer one goes to a worker thread holding its own
 * copy of the tokenizer, read from the same GGUF file, so the event loop keeps serving while it runs.
 *
 * Bounded: at most QUEUE_MAX texts wait for the thread (more: 503 at once), each is answered within `timeoutMs` or
 * rejected with 503. Callers bound each text first (served-model.ts: no text longer than the context can need), and
 * pass `stopAfter`, so the thread never works on more than one context's worth of a prompt.
 */
import { Worker } from 'node:worker_threads';
import { isErrorCode, KvfenceError } from '../util/errors.js';
import type { EncodeOptions, Tokenizer } from './tokenizer.js';

const INLINE_CHARS = 2048;
const QUEUE_MAX = 64;

/** What the thread answers for one text: its ids, or the error the tokenizer threw. */
export type EncodeReply =
  | { readonly id: number; readonly ids: number[] }
  | { readonly id: number; readonly code: string; readonly message: string };

interface Pending {
  resolve(ids: number[]): void;
  reject(error: KvfenceError): void;
  timer: NodeJS.Timeout;
}

export class EncoderThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private broken: KvfenceError | undefined;

  constructor(
    private readonly tokenizer: Tokenizer,
    modelPath: string,
    private readonly timeoutMs: number,
  ) {
    this.worker = new Worker(new URL('./encoder-thread-main.js', import.meta.url), { workerData: { modelPath } });
    this.worker.unref(); // never what keeps a process alive; close() ends it
    this.worker.on('message', (reply: EncodeReply) => this.settle(reply));
    const fail = (why: string) => {
      this.broken = new KvfenceError('internal_error', `the tokenizer thread ${why}`);
      for (const id of [...this.pending.keys()]) this.finish(id)?.reject(this.broken);
    };
    this.worker.on('error', (error) => fail(`failed: ${error.message}`));
    this.worker.on('exit', () => fail('exited'));
  }

  /** The text's ids, as `tokenizer.encode` gives them; long texts are encoded on the thread. */
  async encode(text: string, options: EncodeOptions): Promise<number[]> {
    if (text.length <= INLINE_CHARS) return this.tokenizer.encode(text, options);
    if (this.broken !== undefined) throw this.broken;
    if (this.pending.size >= QUEUE_MAX)
      throw new KvfenceError('server_overloaded', `${QUEUE_MAX} long prompts are already being tokenized`);
    const id = this.nextId++;
    return new Promise<number[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.finish(id)?.reject(
          new KvfenceError('server_overloaded', `tokenizing the prompt took longer than ${this.timeoutMs} ms`),
        );
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      this.worker.postMessage({ id, text, options });
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }

  private settle(reply: EncodeReply): void {
    const pending = this.finish(reply.id);
    if (pending === undefined) return; // timed out already
    if ('ids' in reply) pending.resolve(reply.ids);
    else pending.reject(new KvfenceError(isErrorCode(reply.code) ? reply.code : 'internal_error', reply.message));
  }

  private finish(id: number): Pending | undefined {
    const pending = this.pending.get(id);
    if (pending === undefined) return undefined;
    clearTimeout(pending.timer);
    this.pending.delete(id);
    return pending;
  }
}
