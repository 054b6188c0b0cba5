/**
 * Health, without a key, for load balancers and orchestrators:
 *   /health        the pool and queue figures, and whether every role has a live worker: 200 {"status":"ok",…}, or
 *                  503 {"status":"degraded","down":["decode"],…} when a role of a disaggregated deployment has none
 *                  (every completion would fail), or 503 "shutting_down" once the server is closing
 *   /health/live   200 while the process serves HTTP at all (liveness: restart it only when this fails)
 *   /health/ready  200 only when a request can be served: every role has a live worker and the server is not
 *                  shutting down; else 503 (readiness: send no traffic)
 * Workers are listed by name and role, never by address (DESIGN I12: /health is public).
 */
import type { FastifyInstance } from 'fastify';
import type { InferenceWorker, WorkerStatus } from '../engine/inference-worker.js';

/** Whether the server is closing: set by whoever closes it, before the workers stop. */
export interface ServingState {
  shuttingDown: boolean;
}

const ROLES: readonly WorkerStatus['role'][] = ['prefill', 'decode'];

/** Roles with workers of which none is up (none for a colocated worker, which is this process). */
export function downRoles(workers: readonly WorkerStatus[] | undefined): WorkerStatus['role'][] {
  if (workers === undefined) return [];
  return ROLES.filter((role) => {
    const ofRole = workers.filter((w) => w.role === role);
    return ofRole.length > 0 && !ofRole.some((w) => w.up);
  });
}

export function registerHealthRoutes(
  app: FastifyInstance,
  worker: InferenceWorker,
  state: ServingState,
  waitingAtGateway: () => number,
): void {
  app.get('/health', async (_request, reply) => {
    await worker.refresh?.();
    const s = worker.stats();
    const workers = worker.workers?.();
    const down = downRoles(workers);
    const status = state.shuttingDown ? 'shutting_down' : down.length > 0 ? 'degraded' : 'ok';
    reply.code(status === 'ok' ? 200 : 503);
    return {
      status,
      ...(down.length > 0 ? { down } : {}),
      running: s.running,
      waiting: s.waiting + waitingAtGateway(),
      kvPagesFree: s.pagesFree,
      kvPagesTotal: s.pagesTotal,
      ...(workers !== undefined
        ? {
            workers: workers.map((w) => ({
              name: w.name,
              role: w.role,
              up: w.up,
              pagesFree: w.pagesFree,
              pagesTotal: w.pagesTotal,
            })),
          }
        : {}),
    };
  });
  app.get('/health/live', async () => ({ status: 'live' }));
  app.get('/health/ready', async (_request, reply) => {
    const down = downRoles(worker.workers?.());
    const ready = !state.shuttingDown && down.length === 0;
    reply.code(ready ? 200 : 503);
    return {
      status: ready ? 'ready' : 'not_ready',
      ...(down.length > 0 ? { down } : {}),
      ...(state.shuttingDown ? { shuttingDown: true } : {}),
    };
  });
}
