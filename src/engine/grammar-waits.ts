/**
 * Requests waiting for their output grammar before they enter an engine (DESIGN I11): a new schema's grammar is built
 * on the grammar thread (structured/grammar-thread.ts), never where the engine steps, and the request goes on once its
 * tenant's grammar is cached. Each entry point of an engine (the colocated batch runner, a prefill or a decode worker)
 * holds its waiting requests here, where a cancel, a closed connection or a shutdown finds them.
 */
import type { GrammarCache } from '../structured/grammar-cache.js';
import { asKvfenceError, type KvfenceError } from '../util/errors.js';
import type { GenerationRequest } from './request.js';

interface Wait {
  withdraw(): void;
  failed(error: KvfenceError): void;
  origin: object | undefined;
}

export class GrammarWaits {
  private readonly waits = new Map<string, Wait>();

  constructor(
    private readonly grammars: GrammarCache | undefined,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Runs `ready` now when `request` needs no grammar built (it has no response format, or its tenant's grammar for it
   * is cached): what `ready` throws then, the caller gets. Else runs it once the grammar is built and cached (what it
   * throws then goes to `failed`), or calls `failed` with why it was not built. Throws, holding nothing, past the grammar
   * thread's bounds. `origin`: the connection the request came by (`withdrawFrom`).
   */
  whenReady(
    request: GenerationRequest,
    ready: () => void,
    failed: (error: KvfenceError) => void,
    origin?: object,
  ): void {
    const { constraint, id } = request;
    const withdraw =
      constraint === undefined
        ? undefined
        : this.grammars?.prepare(constraint, request.tenant, this.timeoutMs, (error) => {
            this.waits.delete(id);
            if (error !== undefined) return failed(error);
            try {
              ready();
            } catch (thrown) {
              failed(asKvfenceError(thrown));
            }
          });
    if (withdraw === undefined) ready();
    else this.waits.set(id, { withdraw, failed, origin });
  }

  /** Whether request `id` is waiting here */
  has(id: string): boolean {
    return this.waits.has(id);
  }

  /** Drops request `id` (nothing more is called for it); false when it is not waiting here. */
  withdraw(id: string): boolean {
    const wait = this.waits.get(id);
    if (wait === undefined) return false;
    this.waits.delete(id);
    wait.withdraw();
    return true;
  }

  /** Drops every request that came by `origin`. */
  withdrawFrom(origin: object): void {
    for (const [id, wait] of [...this.waits]) if (wait.origin === origin) this.withdraw(id);
  }

  /** Fails every waiting request with `error`. */
  failAll(error: KvfenceError): void {
    for (const [id, wait] of [...this.waits]) {
      this.withdraw(id);
      wait.failed(error);
    }
  }
}
