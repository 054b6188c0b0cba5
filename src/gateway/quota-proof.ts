/**
 * I1 at the gateway: the context it advertises must fit every tenant's page quota as well as the workers' pools (the
 * workers proved their pools; the tenant table is the gateway's). Otherwise the gateway refuses to start, or with
 * `clamp` advertises what fits the smallest quota, loudly. A reloaded key file must fit the advertised context.
 */
import { type CapacityProof, proveCapacity } from '../kv/capacity.js';
import { KvfenceError } from '../util/errors.js';
import type { KeyFile, TenantDirectory } from './tenants.js';

export function proveTenantQuotas(
  workerContext: number,
  pageSize: number,
  tenants: TenantDirectory,
  clamp: boolean,
): CapacityProof {
  return proveCapacity({
    modelContext: workerContext,
    pageCount: Math.ceil(workerContext / pageSize), // the workers' pools hold it: their own proofs
    pageSize,
    tenantPagesMin: tenants.smallestPageQuota(),
    clamp,
  });
}

/** Throws (the reload is refused, the old table stays) when a tenant's quota in `keyFile` cannot hold `context`. */
export function checkReloadedQuotas(
  keyFile: KeyFile,
  tenants: TenantDirectory,
  context: number,
  pageSize: number,
): void {
  const need = Math.ceil(context / pageSize);
  for (const [tenant, limits] of keyFile.tenants) {
    const quota = tenants.shareOf({ ...tenants.defaults, ...limits }).kvPagesMax;
    if (quota < need)
      throw new KvfenceError(
        'kv_capacity_exceeded',
        `tenant ${tenant}'s KV quota of ${quota} pages cannot hold the advertised context of ${context} tokens (${need} pages); key file not reloaded`,
      );
  }
}
