/**
 * Who may read and write a KV page: one request of one tenant. The epoch tells one use of a page from the next. A
 * prefix-cache page is owned by its tenant's cache (`shared`): any request of that tenant may read it, none may write it.
 */
export interface PageOwner {
  tenant: string;
  request: string;
  shared?: true;
}

export function sameOwner(a: PageOwner, b: PageOwner): boolean {
  return a.tenant === b.tenant && a.request === b.request && a.shared === b.shared;
}

/** The owner of a tenant's prefix-cache page. */
export function sharedOwner(tenant: string): PageOwner {
  return { tenant, request: 'prefix-cache', shared: true };
}

export function ownerLabel(owner: PageOwner | undefined): string {
  if (owner === undefined) return 'nobody (free)';
  return owner.shared === true
    ? `tenant=${owner.tenant} (shared prefix)`
    : `tenant=${owner.tenant} request=${owner.request}`;
}
