/**
 * Per-tenant limits, held by the gateway for the whole cluster (DESIGN I11): a request enters the gate before it
 * reaches any worker and leaves it at its one ending. Whatever the number of workers, a tenant has at most
 * `concurrentRequestsMax` requests in flight (more: 429 at once) and its requests hold at most `kvPagesMax` pages
 * (more: the request waits, in its tenant's order, until pages of that tenant are returned; 503 past the wait bound).
 * Tenants never wait for each other here: each has its own queue.
 *
 *   tenant a:  in flight [r1 r2]  pages 90/128   queue [r3 (needs 64)]     r3 waits for a's pages only
 *   tenant b:  in flight [r1]     pages 10/128   queue []                  b passes
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import type { TenantLimits } from './tenants.js';

/** A request's place in its tenant's limits; `release` (idempotent) gives it back at the request's end. */
export interface TenantLease {
  readonly tenant: string;
  readonly pages: number;
  release(): void;
}

interface Waiter {
  readonly pages: number;
  readonly kvPagesMax: number;
  readonly admit: () => void;
}

interface TenantState {
  /** requests in flight, waiting ones included */
  requests: number;
  /** pages leased to admitted requests */
  pages: number;
  readonly queue: Waiter[];
}

export class TenantGate {
  private readonly states = new Map<string, TenantState>();

  constructor(private readonly limitsOf: (tenant: string) => TenantLimits) {}

  /**
   * Takes a place for a request of `pages` pages: throws 429 when the tenant is at its request limit; resolves once
   * its pages fit the tenant's quota; rejects with 503 after `timeoutMs`, or with request_cancelled when `signal`
   * aborts (the client went away) — holding nothing in either case.
   */
  async enter(tenant: string, pages: number, timeoutMs: number, signal: AbortSignal): Promise<TenantLease> {
    assert(Number.isInteger(pages) && pages >= 1, 'a request needs at least one page');
    const limits = this.limitsOf(tenant);
    const inFlight = this.requestsOf(tenant);
    if (inFlight >= limits.concurrentRequestsMax) {
      throw new KvfenceError(
        'rate_limit_exceeded',
        `tenant ${tenant} already has ${inFlight} requests in flight (limit ${limits.concurrentRequestsMax})`,
      );
    }
    // the capacity proof made every quota hold the largest request; a smaller quota here is a bug, loudly
    assert(pages <= limits.kvPagesMax, `a request of ${pages} pages fits the tenant's quota of ${limits.kvPagesMax}`);
    if (signal.aborted) throw new KvfenceError('request_cancelled', 'the client went away before its request started');
    const state = this.stateOf(tenant);
    state.requests++;
    if (state.queue.length === 0 && state.pages + pages <= limits.kvPagesMax) {
      state.pages += pages;
      return this.lease(tenant, pages);
    }
    return new Promise<TenantLease>((resolve, reject) => {
      const settle = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      };
      const waiter: Waiter = {
        pages,
        kvPagesMax: limits.kvPagesMax,
        admit: () => {
          settle();
          resolve(this.lease(tenant, pages));
        },
      };
      const leave = (error: KvfenceError) => {
        settle();
        state.queue.splice(state.queue.indexOf(waiter), 1);
        this.leave(tenant, 0);
        reject(error);
      };
      const timer = setTimeout(
        () =>
          leave(
            new KvfenceError(
              'server_overloaded',
              `tenant ${tenant}'s requests hold its KV page quota (${limits.kvPagesMax}); none came free within ${timeoutMs} ms`,
            ),
          ),
        timeoutMs,
      );
      const onAbort = () => leave(new KvfenceError('request_cancelled', 'the client went away while waiting'));
      signal.addEventListener('abort', onAbort, { once: true });
      state.queue.push(waiter);
      if (signal.aborted) onAbort();
    });
  }

  /** Requests waiting here for their tenant's pages, all tenants together (the gateway adds them to its waiting count). */
  get waitingCount(): number {
    let n = 0;
    for (const state of this.states.values()) n += state.queue.length;
    return n;
  }

  /** In flight per tenant (waiting ones included), for stats. */
  requestsOf(tenant: string): number {
    return this.states.get(tenant)?.requests ?? 0;
  }

  pagesOf(tenant: string): number {
    return this.states.get(tenant)?.pages ?? 0;
  }

  /** Requests of one tenant waiting here for its pages (the dashboard's per-tenant queue). */
  waitingOf(tenant: string): number {
    return this.states.get(tenant)?.queue.length ?? 0;
  }

  /** Tenants with requests in flight here. */
  activeTenants(): string[] {
    return [...this.states.keys()];
  }

  private lease(tenant: string, pages: number): TenantLease {
    let released = false;
    return {
      tenant,
      pages,
      release: () => {
        if (released) return;
        released = true;
        this.leave(tenant, pages);
      },
    };
  }

  /** A request leaves (`pages`: what it held, 0 if it never got in); the tenant's queue head goes next if it fits. */
  private leave(tenant: string, pages: number): void {
    const state = this.states.get(tenant);
    assert(state !== undefined && state.requests >= 1 && state.pages >= pages, `tenant ${tenant}'s counts stay whole`);
    state.requests--;
    state.pages -= pages;
    for (let head = state.queue[0]; head !== undefined; head = state.queue[0]) {
      if (state.pages + head.pages > head.kvPagesMax) break;
      state.queue.shift();
      state.pages += head.pages;
      head.admit();
    }
    assert(state.queue.length <= state.requests, 'every waiter is counted in flight');
    if (state.requests === 0) {
      assert(state.pages === 0, `tenant ${tenant} holds no pages once nothing is in flight`);
      this.states.delete(tenant);
    }
  }

  private stateOf(tenant: string): TenantState {
    let state = this.states.get(tenant);
    if (state === undefined) {
      state = { requests: 0, pages: 0, queue: [] };
      this.states.set(tenant, state);
    }
    return state;
  }
}
