/**
 * The worker program of the end-to-end tests that need a worker process to misbehave: the production worker
 * (launch/worker-main.ts), started by the supervisor like any other, but given what argv[2] (JSON) asks for:
 * - `faults`: a transport whose transfers suffer per-tenant faults (fault-transport.ts);
 * - `promptPassBusyMs`: forward passes over prompt tokens that hold the thread that long (a big prompt, a big model);
 * - `freezeAfterFirstPromptPass`: the process stops itself (SIGSTOP) as its first pass over prompt tokens returns;
 * - `freezeInFirstPromptPass`: the process stops itself inside its first pass over prompt tokens, once the pass has
 *   been announced (or found too short to announce);
 * - `unprovenCapacity`: a capacity proof that proves nothing (the context is advertised whatever the pool holds), the
 *   2026 incident's first fault, so the tests can show what the rest of kvfence does about it.
 * This program is the only way either reaches a worker process.
 */
import { NoticedForwardPass } from '../../src/cluster/long-pass.js';
import { ForwardPass } from '../../src/compute/forward.js';
import { ENGINE_PARTS } from '../../src/engine/engine-parts.js';
import { WORKER_PARTS } from '../../src/launch/start-worker.js';
import { runSupervisedWorker } from '../../src/launch/worker-main.js';
import { type FaultPlans, faultTransport } from './fault-transport.js';

export interface TestWorkerPlan {
  faults?: FaultPlans;
  unprovenCapacity?: boolean;
  /** each forward pass over a prompt chunk first holds the worker's thread this long (a big prompt on a big model) */
  promptPassBusyMs?: number;
  /** the worker freezes (SIGSTOP) right after its first pass over a prompt chunk, before it sends anything else */
  freezeAfterFirstPromptPass?: boolean;
  /** the worker freezes (SIGSTOP) inside its first pass over a prompt chunk (after the pass's announcement) */
  freezeInFirstPromptPass?: boolean;
}

const plan = JSON.parse(process.argv[2] ?? '{}') as TestWorkerPlan;
const busyMs = plan.promptPassBusyMs;
if (busyMs !== undefined) {
  const run = ForwardPass.prototype.run;
  ForwardPass.prototype.run = function (this: ForwardPass, inputs) {
    if (inputs.some((input) => input.tokens.length > 1)) {
      const until = performance.now() + busyMs;
      while (performance.now() < until) {} // one long native pass: nothing else runs on the thread
    }
    return run.call(this, inputs);
  };
}
if (plan.freezeAfterFirstPromptPass === true) {
  const run = NoticedForwardPass.prototype.run;
  let frozen = false;
  NoticedForwardPass.prototype.run = function (this: NoticedForwardPass, inputs) {
    const outputs = run.call(this, inputs);
    if (!frozen && inputs.some((input) => input.tokens.length > 1)) {
      frozen = true;
      process.kill(process.pid, 'SIGSTOP');
    }
    return outputs;
  };
}
if (plan.freezeInFirstPromptPass === true) {
  const run = ForwardPass.prototype.run;
  let frozen = false;
  ForwardPass.prototype.run = function (this: ForwardPass, inputs) {
    // a serving pass (the start-up probe's is a plain ForwardPass), called from NoticedForwardPass.run after `before`
    if (!frozen && this instanceof NoticedForwardPass && inputs.some((input) => input.tokens.length > 1)) {
      frozen = true;
      process.kill(process.pid, 'SIGSTOP');
    }
    return run.call(this, inputs);
  };
}
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
