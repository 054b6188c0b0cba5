/**
 * Supervised worker processes for `kvfence serve --disaggregated`: each prefill and decode worker is a child process
 * (child_process.fork of the worker program) that gets its typed config and the cluster secret in one IPC message,
 * reports its bound addresses over IPC, and dies with its parent. Children get a minimal environment, never the
 * parent's whole one.
 *
 * Restart policy: a worker that exits unexpectedly is reported (the gateway fails its in-flight requests at once: its
 * control connection breaks), then started again on the same addresses after a backoff that doubles with each exit
 * inside the window (restartBackoffMs × 2^(n−1), at most restartBackoffMaxMs) and resets once the window passes
 * without one. It never stops trying: `status` tells /health which roles have a live worker meanwhile.
 */
import { type ChildProcess, type ForkOptions, fork } from 'node:child_process';
import { errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { WorkerRole } from './control-protocol.js';
import type { WorkerConfig, WorkerStart } from './worker-config.js';

/** What a worker process sends its supervisor once it listens. */
export interface WorkerReady {
  kind: 'ready';
  control: string;
  transfer?: string;
}

export function isWorkerReady(value: unknown): value is WorkerReady {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    v['kind'] === 'ready' &&
    typeof v['control'] === 'string' &&
    (v['transfer'] === undefined || typeof v['transfer'] === 'string')
  );
}

/** The only variables a child inherits: what node and the OS need, nothing of the parent's configuration. */
const CHILD_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR', 'UV_THREADPOOL_SIZE'];

export interface SupervisorOptions {
  /** the worker program (launch/worker-entry.js; tests: a program of their own) and its arguments */
  program: string;
  programArgs?: readonly string[];
  /** the cluster secret, hex: sent to each child in its start message */
  secretHex: string;
  readyTimeoutMs: number;
  restartBackoffMs: number;
  restartBackoffMaxMs: number;
  /** exits further apart than this reset the backoff */
  restartWindowMs: number;
  /** the children's stdout: shown, or dropped (tests) */
  stdout: 'inherit' | 'ignore';
  log: LogSink;
  /** how a child is started: node's fork (tests: one that fails as a system out of processes or files does) */
  fork?: (program: string, args: readonly string[], options: ForkOptions) => ChildProcess;
}

export interface WorkerStatusLine {
  name: string;
  role: WorkerRole;
  /** the process is running and said it listens */
  up: boolean;
  restarts: number;
}

interface Supervised {
  config: WorkerConfig;
  child: ChildProcess | undefined;
  ready: WorkerReady;
  restarts: number;
  /** exits inside the current window, for the backoff */
  recentExits: number;
  lastExitMs: number;
  retry: NodeJS.Timeout | undefined;
}

export class Supervisor {
  private readonly workers = new Map<string, Supervised>();
  /** children forked and not yet ready (a start, a restart): not in `workers` yet, so close() stops them from here */
  private readonly starting = new Set<ChildProcess>();
  private closing = false;

  constructor(private readonly options: SupervisorOptions) {}

  /** Starts a worker and resolves with its addresses once it listens (or rejects with its exit). */
  async start(config: WorkerConfig): Promise<WorkerReady> {
    const { child, ready } = await this.spawn(config);
    const w: Supervised = { config, child, ready, restarts: 0, recentExits: 0, lastExitMs: 0, retry: undefined };
    this.workers.set(config.name, w);
    this.watch(w, child);
    return ready;
  }

  pid(name: string): number | undefined {
    return this.workers.get(name)?.child?.pid;
  }

  /** Sends a worker a signal: SIGTERM drains it (then it is restarted), SIGKILL is a crash (tests). */
  kill(name: string, signal: NodeJS.Signals = 'SIGKILL'): void {
    this.workers.get(name)?.child?.kill(signal);
  }

  status(): WorkerStatusLine[] {
    return [...this.workers.values()].map((w) => ({
      name: w.config.name,
      role: w.config.role,
      up: w.child !== undefined,
      restarts: w.restarts,
    }));
  }

  /** From now on a worker that exits stays down, and no restart waiting for its backoff runs (a server stopping). */
  stopRestarting(): void {
    this.closing = true;
    for (const w of this.workers.values()) if (w.retry !== undefined) clearTimeout(w.retry);
  }

  /** Stops every child, the ones still starting included (a failed startup closes the rest at once). */
  async close(): Promise<void> {
    this.stopRestarting();
    const children = [...[...this.workers.values()].map((w) => w.child), ...this.starting];
    await Promise.all(children.map((child) => stopChild(child)));
  }

  /**
   * Starts a child and resolves once it says it listens. A child that cannot be started at all (fork throws; or it
   * emits 'error' and never 'exit', as on EAGAIN, ENOENT or EMFILE, where it may even lack its IPC channel) rejects
   * like one that exits during startup, so a restart backs off and tries again: unhandled, it ended the supervisor,
   * the gateway and every healthy worker with it, most likely just when a worker had died of exhausted memory.
   */
  private spawn(config: WorkerConfig): Promise<{ child: ChildProcess; ready: WorkerReady }> {
    const env: NodeJS.ProcessEnv = {};
    for (const name of CHILD_ENV) if (process.env[name] !== undefined) env[name] = process.env[name];
    return new Promise((resolve, reject) => {
      const failed = (why: string) => new KvfenceError('worker_unavailable', `worker ${config.name} ${why}`);
      let child: ChildProcess;
      try {
        child = (this.options.fork ?? fork)(this.options.program, [...(this.options.programArgs ?? [])], {
          env,
          stdio: ['ignore', this.options.stdout, 'inherit', 'ipc'],
        });
      } catch (error) {
        reject(failed(`could not be started: ${errorMessage(error)}`));
        return;
      }
      this.starting.add(child);
      let settled = false;
      const fail = (error: KvfenceError) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.starting.delete(child);
        child.kill('SIGKILL');
        reject(error);
      };
      const timer = setTimeout(
        () => fail(failed(`did not start within ${this.options.readyTimeoutMs} ms (--worker-start-timeout-ms)`)),
        this.options.readyTimeoutMs,
      );
      // for good: an error event without a listener (a failed IPC send later on) would end the supervisor
      child.on('error', (error) => {
        if (!settled) fail(failed(`could not be started: ${error.message}`));
        else this.options.log.error({ worker: config.name, err: error.message }, 'worker process error');
      });
      child.once('exit', (code, signal) => {
        this.starting.delete(child);
        fail(failed(`exited during startup (code ${code}, signal ${signal})`));
      });
      child.on('message', (message: unknown) => {
        if (settled || !isWorkerReady(message)) return;
        settled = true;
        clearTimeout(timer);
        this.starting.delete(child);
        if (this.closing) {
          // ready after close() began: stopped like the rest, never handed out
          void stopChild(child);
          reject(failed('started while the cluster closed'));
          return;
        }
        resolve({ child, ready: message });
      });
      if (typeof child.send !== 'function') {
        fail(failed('could not be started: it has no IPC channel'));
        return;
      }
      const start: WorkerStart = { kind: 'start', config, secretHex: this.options.secretHex };
      child.send(start, (error) => {
        if (error !== null) fail(failed(`could not be started: ${error.message}`));
      });
    });
  }

  private watch(w: Supervised, child: ChildProcess): void {
    child.once('exit', (code, signal) => {
      if (this.closing || w.child !== child) return;
      w.child = undefined;
      const now = Date.now();
      w.recentExits = now - w.lastExitMs > this.options.restartWindowMs ? 1 : w.recentExits + 1;
      w.lastExitMs = now;
      const delayMs = Math.min(
        this.options.restartBackoffMs * 2 ** (w.recentExits - 1),
        this.options.restartBackoffMaxMs,
      );
      // exit 0 is a drained worker (SIGTERM: it served what it held first); anything else failed what it held
      if (code === 0)
        this.options.log.info(
          { worker: w.config.name, restartInMs: delayMs },
          'worker drained and exited; restarting it',
        );
      else
        this.options.log.error(
          { worker: w.config.name, code, signal, restartInMs: delayMs },
          'worker exited; its in-flight requests fail; restarting it',
        );
      this.scheduleRestart(w, delayMs);
    });
  }

  private scheduleRestart(w: Supervised, delayMs: number): void {
    w.retry = setTimeout(() => {
      w.retry = undefined;
      if (this.closing) return;
      // the same addresses: the gateway reconnects by itself
      const config: WorkerConfig = {
        ...w.config,
        controlListen: w.ready.control,
        ...(w.ready.transfer !== undefined ? { transferListen: w.ready.transfer } : {}),
      };
      this.spawn(config).then(
        ({ child, ready }) => {
          w.child = child;
          w.ready = ready;
          w.restarts++;
          this.options.log.info({ worker: w.config.name, restarts: w.restarts }, 'worker restarted');
          this.watch(w, child);
        },
        (error: unknown) => {
          if (this.closing) return; // stopped by close() while it started
          this.options.log.error({ worker: w.config.name, err: String(error) }, 'worker restart failed; trying again');
          const next = Math.min(delayMs * 2, this.options.restartBackoffMaxMs);
          this.scheduleRestart(w, Math.max(next, this.options.restartBackoffMs));
        },
      );
    }, delayMs);
  }
}

/** SIGTERM (a worker drains), SIGKILL 5 s later if it has not exited; resolves once it has */
function stopChild(child: ChildProcess | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return resolve();
    const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
    child.once('exit', () => {
      clearTimeout(force);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
