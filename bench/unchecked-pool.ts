/**
 * The page pool with its isolation checks (I3 on reads) and its scrub on free (I4) removed: the baseline that the
 * isolation-cost figure of `npm run bench` is measured against. Benchmarks only; production has no way to build it.
 */
import { PagePool } from '../src/kv/page-pool.js';

export class UncheckedPagePool extends PagePool {
  protected override checkPage(): void {}

  protected override scrub(): void {}
}

export function benchPool(layout: ConstructorParameters<typeof PagePool>[0], pageCount: number, unchecked: boolean) {
  return unchecked ? new UncheckedPagePool(layout, pageCount) : new PagePool(layout, pageCount);
}
