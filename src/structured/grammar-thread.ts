/**
 * Output grammars built off an engine's thread (DESIGN I11). A schema's grammar takes up to ~0.1–0.25 s to build
 * (LIMITS.grammarWorkMax); built where the engine steps, each new schema held every tenant's next token that long, and
 * eight connections sending fresh schemas took a stream's inter-token p99 to 1.5–1.8 s. Here a worker thread builds
 * them, one at a time, the tenants taking turns (tenant-turns.ts): a tenant with a backlog of schemas delays another's
 * first one by one build at most. Calls for a grammar already being built (the same tenant, the same constraint)
 * share that build.
 *
 * Bounded: at most TENANT_BUILDS_MAX builds of one tenant are queued and TENANT_WAITERS_MAX of its requests wait
 * (more: 429 at once), at most WAITERS_MAX requests in all (more: 503 at once); each request hears within its
 * `timeoutMs` (else 503), and a build that runs past BUILD_TIMEOUT_MS fails its requests with 503 and the thread is
 * started again for the next. A build whose requests all left still goes to the cache (`onBuilt`), so a retry finds
 * it. The thread starts on the first build: a server that never sees a response format has none.
 */
import { asKvfenceError, KvfenceError } from '../util/errors.js';
import { TenantTurns } from '../util/tenant-turns.js';
import { ThreadCalls } from '../util/thread-calls.js';
import { Grammar, type GrammarTables } from './grammar.js';
import type { OutputConstraint } from './grammar-cache.js';

const TENANT_BUILDS_MAX = 8;
const TENANT_WAITERS_MAX = 64;
const WAITERS_MAX = 256;
/** a build is bounded by its work (~0.25 s here); one this late means the thread is lost */
const BUILD_TIMEOUT_MS = 30_000;

/** A build's outcome for one request: the grammar, or why there is none. */
export type BuildDone = (result: Grammar | KvfenceError) => void;

/** The thread's tables as a Grammar (its constructor checks them), or why they are not one. */
function grammarOf(tables: GrammarTables): Grammar | KvfenceError {
  try {
    return new Grammar(tables);
  } catch (error) {
    return asKvfenceError(error);
  }
}

interface Waiter {
  done: BuildDone;
  timer: NodeJS.Timeout;
}

interface Build {
  key: string;
  tenant: string;
  constraint: OutputConstraint;
  waiters: Set<Waiter>;
}

export class GrammarThread {
  private calls: ThreadCalls<OutputConstraint, GrammarTables> | undefined;
  /** every build queued or running, by key */
  private readonly builds = new Map<string, Build>();
  /** each tenant's queued builds, the tenants taking turns */
  private readonly queued = new TenantTurns<Build>();
  private running: Build | undefined;
  private waiting = 0;
  private readonly tenantWaiting = new Map<string, number>();
  private buildsRun = 0;

  /** `onBuilt(key, tenant, grammar)`: each grammar built, before its requests hear (they may all have left) */
  constructor(private readonly onBuilt: (key: string, tenant: string, grammar: Grammar) => void) {}

  /**
   * Builds `tenant`'s grammar for `constraint` (`key` names the two) and calls `done` once with it, or with the build's
   * 400, or a 503 after `timeoutMs`; never at once (`done` must not throw). Throws (nothing queued) past the bounds.
   * Returns a function that withdraws the call: `done` is not called then.
   */
  build(key: string, tenant: string, constraint: OutputConstraint, timeoutMs: number, done: BuildDone): () => void {
    let build = this.builds.get(key);
    const busy = (what: string) =>
      new KvfenceError('rate_limit_exceeded', `${what}; send the next when one is answered`);
    if (build === undefined && this.queued.sizeOf(tenant) >= TENANT_BUILDS_MAX)
      throw busy(`${TENANT_BUILDS_MAX} of your response formats are already waiting to be compiled`);
    if ((this.tenantWaiting.get(tenant) ?? 0) >= TENANT_WAITERS_MAX)
      throw busy(`${TENANT_WAITERS_MAX} of your requests are already waiting for their response formats`);
    if (this.waiting >= WAITERS_MAX)
      throw new KvfenceError('server_overloaded', `${WAITERS_MAX} requests are waiting for their response formats`);
    if (build === undefined) {
      build = { key, tenant, constraint, waiters: new Set() };
      this.builds.set(key, build);
      this.queued.push(tenant, build);
    }
    const waiter: Waiter = {
      done,
      timer: setTimeout(() => {
        if (this.withdraw(build, waiter))
          done(new KvfenceError('server_overloaded', `the response format was not compiled within ${timeoutMs} ms`));
      }, timeoutMs),
    };
    build.waiters.add(waiter);
    this.count(tenant, +1);
    this.next();
    return () => {
      this.withdraw(build, waiter);
    };
  }

  /** builds the thread has run (for tests) */
  get built(): number {
    return this.buildsRun;
  }

  /**
   * Ends the thread: the running build and the queued ones fail their requests (a later build starts a fresh thread).
   * Left queued, they ran on a thread started after the close (review finding).
   */
  async close(): Promise<void> {
    const closed = new KvfenceError('server_overloaded', 'the grammar thread was closed');
    for (const build of this.queued.drain()) this.notify(this.release(build), closed);
    const calls = this.calls;
    this.calls = undefined;
    await calls?.close();
  }

  /** Takes `waiter` off its build (a queued build nobody waits for goes); false when it was not on it. */
  private withdraw(build: Build, waiter: Waiter): boolean {
    if (!build.waiters.delete(waiter)) return false;
    clearTimeout(waiter.timer);
    this.count(build.tenant, -1);
    if (build.waiters.size === 0 && build !== this.running) {
      this.builds.delete(build.key);
      this.queued.remove(build.tenant, build);
    }
    return true;
  }

  /** Starts the next build in turn when the thread is free. */
  private next(): void {
    if (this.running !== undefined) return;
    const next = this.queued.take();
    if (next === undefined) return;
    const { tenant, item: build } = next;
    this.running = build;
    this.calls ??= new ThreadCalls(
      new URL('./grammar-thread-main.js', import.meta.url),
      undefined,
      {
        thread: 'the grammar thread',
        busy: () => 'the grammar thread is busy',
        callerBusy: () => 'the grammar thread is busy',
        slow: (ms) => `compiling the response format took longer than ${ms} ms`,
      },
      BUILD_TIMEOUT_MS,
      1,
      1,
    );
    // a build past its time or a lost thread is its 503, and a fresh thread takes the next (thread-calls.ts)
    this.calls.call(build.constraint, tenant).then(
      (tables) => this.finish(build, grammarOf(tables)),
      (error: KvfenceError) => this.finish(build, error),
    );
  }

  /** Counts a tenant's waiting requests, and all. */
  private count(tenant: string, change: 1 | -1): void {
    this.waiting += change;
    const now = (this.tenantWaiting.get(tenant) ?? 0) + change;
    if (now === 0) this.tenantWaiting.delete(tenant);
    else this.tenantWaiting.set(tenant, now);
  }

  private finish(build: Build, result: Grammar | KvfenceError): void {
    this.buildsRun++;
    this.running = undefined;
    const waiters = this.release(build);
    this.next();
    if (!(result instanceof KvfenceError)) this.onBuilt(build.key, build.tenant, result);
    this.notify(waiters, result);
  }

  /** Takes a build off the books with its waiters' timers and counts; returns the waiters, to be told. */
  private release(build: Build): Waiter[] {
    this.builds.delete(build.key);
    const waiters = [...build.waiters];
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      this.count(build.tenant, -1);
    }
    build.waiters.clear();
    return waiters;
  }

  private notify(waiters: readonly Waiter[], result: Grammar | KvfenceError): void {
    for (const waiter of waiters) {
      try {
        waiter.done(result);
      } catch {
        // `done` must not throw; one that does must not cost the others their ending
      }
    }
  }
}
