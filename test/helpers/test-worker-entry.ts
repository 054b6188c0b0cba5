/**
 * The worker program of the end-to-end tests that need a worker process to misbehave: the production worker
 * (launch/worker-main.ts), started by the supervisor like any other, but given what argv[2] (JSON) asks for:
 * - `faults`: a transport whose transfers suffer per-tenant faults (fault-transport.ts);
 * - `unprovenCapacity`: a capacity proof that proves nothing (the context is advertised whatever the pool holds), the
 *   2026 incident's first fault, so the tests can show what the rest of kvfence does about it.
 * This program is the only way either reaches a worker process.
 */
import { ENGINE_PARTS } from '../../src/engine/engine-parts.js';
import { WORKER_PARTS } from '../../src/launch/start-worker.js';
import { runSupervisedWorker } from '../../src/launch/worker-main.js';
import { type FaultPlans, faultTransport } from './fault-transport.js';

export interface TestWorkerPlan {
  faults?: FaultPlans;
  unprovenCapacity?: boolean;
}

const plan = JSON.parse(process.argv[2] ?? '{}') as TestWorkerPlan;
runSupervisedWorker({
  ...(plan.faults !== undefined ? { transport: faultTransport(plan.faults) } : {}),
  ...(plan.unprovenCapacity === true
    ? {
        parts: {
          ...WORKER_PARTS,
          capacity: (input) => {
            const wanted = Math.min(input.modelContext, input.requestedContext ?? input.modelContext);
            return {
              ...ENGINE_PARTS.capacity({ ...input, pageCount: Math.ceil(wanted / input.pageSize) }),
              clamped: false,
            };
          },
        },
      }
    : {}),
});
