/**
 * How a worker process ends. The first SIGTERM (or SIGINT) drains it: readiness turns 503 at once, every gateway is
 * told `draining` and routes nothing new here, what the worker holds is served until the gateways let go or the
 * drain deadline passes, then the process exits 0. A second signal exits at once (1). The CLI's `kvfence
 * prefill|decode` and a supervised child (worker-main.ts) both end here. Both also ignore SIGHUP from their start
 * (hangup.ts: a worker has no key file, and node's default would end it undrained).
 */
import type { RunningWorker } from '../cluster/worker-config.js';
import { errorMessage } from '../util/errors.js';
import type { WorkerHealth, WorkerPhase } from './worker-health.js';

export interface WorkerLifecycleOptions {
  /** the process's phase, which its health listener (if any) reports: set to draining here */
  state: { phase: WorkerPhase };
  /** the health listener, closed once the drain is done; absent: none (a supervised child) */
  health?: WorkerHealth;
  drainTimeoutMs: number;
  announce: (line: string) => void;
}

/** Installs the signal handlers of a started worker. */
export function endWorkerOnSignal(worker: RunningWorker, options: WorkerLifecycleOptions): void {
  const { state, health } = options;
  const onSignal = (signal: NodeJS.Signals) => {
    if (state.phase === 'draining') {
      options.announce(`kvfence: ${worker.name}: ${signal} again; exiting now`);
      process.exit(1);
    }
    state.phase = 'draining';
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
}
