/**
 * Bounds on the load the auditor makes: a total request budget shared by all scenarios, and a pool that runs tasks
 * at most `concurrency` at a time. A scenario that runs out of budget stops and says so.
 */
export class BudgetExhausted extends Error {
  override name = 'BudgetExhausted';
}

export class CallBudget {
  private used = 0;

  constructor(readonly total: number) {}

  get remaining(): number {
    return this.total - this.used;
  }

  /** Takes one request from the budget; throws BudgetExhausted when none is left. */
  take(): void {
    if (this.used >= this.total) throw new BudgetExhausted(`the request budget (${this.total}) is spent`);
    this.used++;
  }
}

/**
 * Runs `tasks` with at most `concurrency` in flight; results in task order. A task's rejection rejects the whole, once
 * the tasks already in flight have settled (none starts after it): nothing of the scenario runs on after it ended.
 */
export async function runPool<T>(tasks: readonly (() => Promise<T>)[], concurrency: number): Promise<T[]> {
  const results: T[] = new Array(tasks.length);
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (next < tasks.length && !failed) {
      const index = next++;
      try {
        results[index] = await tasks[index]!();
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  const settled = await Promise.allSettled(
    Array.from({ length: Math.max(1, Math.min(concurrency, tasks.length)) }, worker),
  );
  for (const s of settled) if (s.status === 'rejected') throw s.reason;
  return results;
}
