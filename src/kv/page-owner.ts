/** Who may read and write a KV page: one request of one tenant. The epoch tells one use of a page from the next. */
export interface PageOwner {
  tenant: string;
  request: string;
}

export function ownerLabel(owner: PageOwner | undefined): string {
  return owner === undefined ? 'nobody (free)' : `tenant=${owner.tenant} request=${owner.request}`;
}
