/**
 * The gateway's side of the dashboard's `page_map` messages (control-protocol.ts): one question to a worker, answered
 * by id within a deadline. A worker that is down, late or answers another's id gives no picture, never a wait.
 */
import type { PageMapReport } from '../kv/page-map.js';
import type { WorkerLink } from './worker-link.js';

interface Waiter {
  readonly link: WorkerLink;
  readonly settle: (report: PageMapReport | undefined) => void;
}

export class PageMapRequests {
  /** at most one per link and round: the dispatcher runs one round at a time */
  private readonly waiters = new Map<number, Waiter>();
  private nextId = 1;

  constructor(private readonly timeoutMs: number) {}

  ask(link: WorkerLink): Promise<PageMapReport | undefined> {
    if (!link.up) return Promise.resolve(undefined);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(undefined), this.timeoutMs);
      const settle = (report: PageMapReport | undefined) => {
        clearTimeout(timer);
        this.waiters.delete(id);
        resolve(report);
      };
      this.waiters.set(id, { link, settle });
      if (!link.send({ type: 'page_map', id })) settle(undefined);
    });
  }

  /** A worker's answer: only the link that was asked may answer an id. */
  answer(link: WorkerLink, id: number, report: PageMapReport | undefined): void {
    const waiter = this.waiters.get(id);
    if (waiter?.link === link) waiter.settle(report);
  }
}
