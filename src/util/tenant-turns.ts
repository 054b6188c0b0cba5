/**
 * Whose work a shared thread runs next (DESIGN I11): each tenant's items wait in their own queue, oldest first, and
 * the next item is the oldest of the tenant whose last turn is longest ago. A tenant with none since its items last
 * ran out goes first; a tenant with a backlog delays another's next item by one item at most. Bounded by its callers'
 * queues; the turns it remembers are dropped once older than every tenant with work, where they rank as none would.
 */
export class TenantTurns<T> {
  /** each tenant's waiting items, oldest first; a tenant leaves the map when its last item is taken or removed */
  private readonly queued = new Map<string, T[]>();
  /**
   * when tenants last had an item taken: kept after their items run out (a tenant sending one item at a time must not
   * rank as new each time, ahead of a tenant whose backlog waits)
   */
  private readonly lastTurn = new Map<string, number>();
  private turnsTaken = 0;
  private count = 0;

  /** items waiting, of every tenant */
  get size(): number {
    return this.count;
  }

  /** items of `tenant` waiting */
  sizeOf(tenant: string): number {
    return this.queued.get(tenant)?.length ?? 0;
  }

  push(tenant: string, item: T): void {
    const queued = this.queued.get(tenant);
    if (queued === undefined) this.queued.set(tenant, [item]);
    else queued.push(item);
    this.count++;
  }

  /** Takes `item` out of `tenant`'s queue; false when it was not there (taken already). */
  remove(tenant: string, item: T): boolean {
    const queued = this.queued.get(tenant);
    const at = queued?.indexOf(item) ?? -1;
    if (queued === undefined || at < 0) return false;
    queued.splice(at, 1);
    if (queued.length === 0) this.queued.delete(tenant);
    this.count--;
    return true;
  }

  /**
   * The next item to run and its tenant, of the tenants `eligible` allows, taken out of the queue; undefined when none
   * waits.
   */
  take(eligible: (tenant: string) => boolean = () => true): { tenant: string; item: T } | undefined {
    let tenant: string | undefined;
    const turn = (t: string) => this.lastTurn.get(t) ?? -1;
    for (const t of this.queued.keys()) if ((tenant === undefined || turn(t) < turn(tenant)) && eligible(t)) tenant = t;
    if (tenant === undefined) return undefined;
    const queued = this.queued.get(tenant)!;
    const item = queued.shift()!;
    if (queued.length === 0) this.queued.delete(tenant);
    this.count--;
    this.lastTurn.set(tenant, this.turnsTaken++);
    let oldest = this.lastTurn.get(tenant)!;
    for (const t of this.queued.keys()) oldest = Math.min(oldest, turn(t));
    for (const [t, at] of this.lastTurn) if (at < oldest) this.lastTurn.delete(t);
    return { tenant, item };
  }

  /** Every waiting item, taken out of the queues. */
  drain(): T[] {
    const items = [...this.queued.values()].flat();
    this.queued.clear();
    this.count = 0;
    return items;
  }
}
