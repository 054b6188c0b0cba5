/**
 * `serve --disaggregated` restarts a worker that hangs, not only one that exits. The supervisor sees processes, not
 * answers: a worker whose event loop is wedged (a deadlock, an endless loop, a native call that never returns, SIGSTOP)
 * keeps its process, so it was never restarted, and with one worker of its role every request got 503 for good. The
 * gateway's heartbeat already takes it as gone (cluster/worker-link.ts); once it has been gone this long while its
 * process still runs, it is killed, and the restart policy starts it again. (Under Kubernetes each worker's liveness
 * probe does this: deploy/.)
 */
import type { Supervisor } from '../cluster/supervisor.js';
import type { LogSink } from '../util/log.js';

/** What the watchdog reads of the gateway's links: the worker's name (from its hello) and whether it answers. */
export interface LinkState {
  readonly name: string | undefined;
  readonly up: boolean;
}

/** Watches until the returned function is called; a worker down `afterMs` while the supervisor runs it is SIGKILLed. */
export function killHungWorkers(
  supervisor: Supervisor,
  links: () => readonly LinkState[],
  afterMs: number,
  log: LogSink,
): () => void {
  const downSince = new Map<string, number>();
  const timer = setInterval(
    () => {
      const now = Date.now();
      const running = new Set(
        supervisor
          .status()
          .filter((s) => s.up)
          .map((s) => s.name),
      );
      for (const link of links()) {
        const name = link.name;
        if (name === undefined) continue;
        if (link.up || !running.has(name)) {
          downSince.delete(name);
          continue;
        }
        const since = downSince.get(name) ?? now;
        downSince.set(name, since);
        if (now - since < afterMs) continue;
        downSince.delete(name);
        log.error(
          { worker: name, silentMs: now - since },
          'worker silent while its process runs: killing it to restart it',
        );
        supervisor.kill(name, 'SIGKILL');
      }
    },
    Math.max(50, Math.floor(afterMs / 10)),
  );
  timer.unref();
  return () => clearInterval(timer);
}
