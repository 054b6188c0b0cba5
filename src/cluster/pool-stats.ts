/** A worker's answer to the gateway's `stats` message: its pool's counts and, per tenant, requests and pages held. */
import type { PagePool } from '../kv/page-pool.js';
import type { PoolStats } from './control-protocol.js';

/** `requestTenants` names the tenant of each request the worker holds, one entry per request. */
export function poolStats(
  pool: PagePool,
  requestTenants: Iterable<string>,
  running: number,
  waiting: number,
): PoolStats {
  const requests = new Map<string, number>();
  for (const tenant of requestTenants) requests.set(tenant, (requests.get(tenant) ?? 0) + 1);
  return {
    pagesTotal: pool.pageCount,
    pagesFree: pool.freePageCount,
    reservations: pool.reservationCount,
    running,
    waiting,
    tenants: [...requests].map(([tenant, n]) => [tenant, { requests: n, pages: pool.pagesOfTenant(tenant) }]),
  };
}
