/**
 * The program a supervisor forks for each worker of `kvfence serve --disaggregated`: it waits (bounded) for its one
 * start message over the IPC channel — the typed config and the cluster secret, never argv or the environment —
 * starts the worker, reports its bound addresses, drains and exits 0 on SIGTERM (worker-lifecycle.ts: the supervisor
 * then starts its successor), and exits at once when its supervisor is gone.
 */
import { parseWorkerStart, WORKER_DEFAULTS } from '../cluster/worker-config.js';
import { Hangup } from './hangup.js';
import { reportFailure } from './report-failure.js';
import { startWorker, type WorkerDeps } from './start-worker.js';
import { endWorkerOnSignal } from './worker-lifecycle.js';

const START_TIMEOUT_MS = 30_000;

/** Runs this process as a supervised worker; `deps` lets a test program inject faults (test/helpers/). */
export function runSupervisedWorker(deps: WorkerDeps = {}): void {
  const send = process.send?.bind(process);
  if (send === undefined) {
    process.stderr.write('kvfence: this program is started by a supervisor (kvfence serve --disaggregated)\n');
    process.exit(2);
  }
  const timer = setTimeout(() => {
    process.stderr.write(`kvfence: no start message within ${START_TIMEOUT_MS} ms\n`);
    process.exit(1);
  }, START_TIMEOUT_MS);
  process.once('disconnect', () => process.exit(0));
  new Hangup((line) => process.stdout.write(`${line}\n`)).ignore('a worker has no key file');
  process.once('message', (message: unknown) => {
    clearTimeout(timer);
    void (async () => {
      try {
        const start = parseWorkerStart(message);
        const worker = await startWorker(start.config, new Uint8Array(Buffer.from(start.secretHex, 'hex')), {
          ...deps,
          announce: (line) => process.stdout.write(`${line}\n`),
        });
        endWorkerOnSignal(worker, {
          state: { phase: 'ready' },
          drainTimeoutMs: start.config.drainTimeoutMs ?? WORKER_DEFAULTS.drainTimeoutMs,
          announce: (line) => process.stdout.write(`${line}\n`),
        });
        send({ kind: 'ready', control: worker.controlAddress, transfer: worker.transferAddress });
      } catch (error) {
        process.exit(reportFailure(error));
      }
    })();
  });
}
