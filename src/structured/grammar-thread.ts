/**
 * Output grammars built off an engine's thread (DESIGN I11). A schema's grammar takes up to ~0.1–0.25 s to build
 * (LIMITS.grammarWorkMax); built where the engine steps, each new schema held every tenant's next token that long, and
 * eight connections sending fresh schemas took a stream's inter-token p99 to 1.5–1.8 s. Here a worker thread builds
 * them, one at a time, the tenants taking turns: a tenant with a backlog of schemas delays another's first one by one
 * build at most. Calls for a grammar already being built (the same tenant, the same constraint) share that build.
 *
 * Bounded: at most TENANT_BUILDS_MAX builds of one tenant are waiting (more: 429 at once) and at most WAITERS_MAX
 * requests in all (more: 503 at once); each request hears within its `timeoutMs` (else 503), and a build that runs
 * past BUILD_TIMEOUT_MS fails its requests with 503 and the thread is started again for the next. The thread starts
 * on the first build: a server that never sees a response format has none.
 */
import { asKvfenceError, KvfenceError } from '../util/errors.js';
import { ThreadCalls } from '../util/thread-calls.js';
import { Grammar, type GrammarTables } from './grammar.js';
import type { OutputConstraint } from './grammar-cache.js';

const TENANT_BUILDS_MAX = 8;
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
  /** each tenant's queued builds, oldest first */
  private readonly queued = new Map<string, Build[]>();
  /** when each tenant with builds queued or running last had one started */
  private readonly lastTurn = new Map<string, number>();
  private turnsTaken = 0;
  private running: Build | undefined;
  private waiting = 0;
  private buildsRun = 0;

  /**
   * Builds `tenant`'s grammar for `constraint` (`key` names the two) and calls `done` once with it, or with the build's
   * 400, or a 503 after `timeoutMs`; never at once (`done` must not throw). Throws (nothing queued) past the bounds.
   * Returns a function that withdraws the call: `done` is not called then.
   */
  build(key: string, tenant: string, constraint: OutputConstraint, timeoutMs: number, done: BuildDone): () => void {
    let build = this.builds.get(key);
    if (build === undefined) {
      if ((this.queued.get(tenant)?.length ?? 0) >= TENANT_BUILDS_MAX)
        throw new KvfenceError(
          'rate_limit_exceeded',
          `${TENANT_BUILDS_MAX} of your response formats are already waiting to be compiled; send the next when one is answered`,
        );
    }
    if (this.waiting >= WAITERS_MAX)
      throw new KvfenceError('server_overloaded', `${WAITERS_MAX} requests are waiting for their response formats`);
    if (build === undefined) {
      build = { key, tenant, constraint, waiters: new Set() };
      this.builds.set(key, build);
      const queued = this.queued.get(tenant);
      if (queued === undefined) this.queued.set(tenant, [build]);
      else queued.push(build);
    }
    const waiter: Waiter = {
      done,
      timer: setTimeout(() => {
        if (this.withdraw(build, waiter))
          done(new KvfenceError('server_overloaded', `the response format was not compiled within ${timeoutMs} ms`));
      }, timeoutMs),
    };
    build.waiters.add(waiter);
    this.waiting++;
    this.next();
    return () => {
      this.withdraw(build, waiter);
    };
  }

  /** builds the thread has run (for tests) */
  get built(): number {
    return this.buildsRun;
  }

  async close(): Promise<void> {
    const calls = this.calls;
    this.calls = undefined;
    await calls?.close();
  }

  /** Takes `waiter` off its build (a queued build nobody waits for goes); false when it was not on it. */
  private withdraw(build: Build, waiter: Waiter): boolean {
    if (!build.waiters.delete(waiter)) return false;
    clearTimeout(waiter.timer);
    this.waiting--;
    if (build.waiters.size === 0 && build !== this.running) {
      this.builds.delete(build.key);
      const queued = this.queued.get(build.tenant)!.filter((b) => b !== build);
      if (queued.length === 0) this.queued.delete(build.tenant);
      else this.queued.set(build.tenant, queued);
      this.forgetTurn(build.tenant);
    }
    return true;
  }

  /**
   * Starts a build when the thread is free: the oldest of the tenant whose last turn is longest ago (a tenant with none
   * since its builds last ran out goes first).
   */
  private next(): void {
    if (this.running !== undefined) return;
    let tenant: string | undefined;
    const turn = (t: string) => this.lastTurn.get(t) ?? -1;
    for (const t of this.queued.keys()) if (tenant === undefined || turn(t) < turn(tenant)) tenant = t;
    if (tenant === undefined) return;
    const queued = this.queued.get(tenant)!;
    const build = queued.shift()!;
    if (queued.length === 0) this.queued.delete(tenant);
    this.lastTurn.set(tenant, this.turnsTaken++);
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
    const calls = this.calls;
    calls.call(build.constraint, tenant).then(
      (tables) => this.finish(build, grammarOf(tables)),
      (error: KvfenceError) => {
        // a grammar the schema cannot have is its 400; anything else may have lost the thread: a fresh one next
        if (error.code !== 'invalid_request_error' && this.calls === calls) void this.close();
        this.finish(build, error);
      },
    );
  }

  /** A tenant with nothing queued nor running gives up its place in the turns. */
  private forgetTurn(tenant: string): void {
    if (!this.queued.has(tenant) && this.running?.tenant !== tenant) this.lastTurn.delete(tenant);
  }

  private finish(build: Build, result: Grammar | KvfenceError): void {
    this.buildsRun++;
    this.running = undefined;
    this.builds.delete(build.key);
    this.forgetTurn(build.tenant);
    const waiters = [...build.waiters];
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      this.waiting--;
    }
    build.waiters.clear();
    this.next();
    for (const waiter of waiters) waiter.done(result);
  }
}
