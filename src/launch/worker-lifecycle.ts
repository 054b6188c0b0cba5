/**
 * How a worker process ends. The first SIGTERM (or SIGINT) drains it: readiness turns 503 at once, every gateway is
 * told `draining` and routes nothing new here, what the worker holds is served until the gateways let go or the
 * drain deadline passes, then the process exits 0. A second signal exits at once (1). The CLI's `kvfence
 * prefill|decode` and a supervised child (worker-main.ts) both end here.
 */
import type { RunningWorker } from '../cluster/worker-config.js';
import { errorMessage } from '../util/errors.js';
import type { WorkerHealth } from './worker-health.js';
import { serveWorkerHealth } from './worker-health.js';

export interface WorkerLifecycleOptions {
  /** host:port of the /health/live and /health/ready listener; absent: none (a supervised child) */
  healthListen?: string;
  drainTimeoutMs: number;
  announce: (line: string) => void;
}

/** Starts the health listener (if asked) and installs the signal handlers; returns the health address, if any. */
export async function endWorkerOnSignal(
  worker: RunningWorker,
  options: WorkerLifecycleOptions,
): Promise<string | undefined> {
  let draining = false;
  let health: WorkerHealth | undefined;
  if (options.healthListen !== undefined) health = await serveWorkerHealth(options.healthListen, () => draining);
  const onSignal = (signal: NodeJS.Signals) => {
    if (draining) {
      options.announce(`kvfence: ${worker.name}: ${signal} again; exiting now`);
      process.exit(1);
    }
    draining = true;
    options.announce(`kvfence: ${worker.name}: ${signal}: draining (at most ${options.drainTimeoutMs} ms)`);
    worker
      .drain(options.drainTimeoutMs)
      .then(() => health?.close())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          options.announce(`kvfence: ${worker.name}: drain failed: ${errorMessage(error)}`);
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return health?.address;
}
