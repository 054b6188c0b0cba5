/**
 * Supervised worker processes for `kvfence serve --disaggregated`: each prefill and decode worker is the same
 * `kvfence` CLI in a child process (child_process.fork, so it reports its bound addresses over the IPC channel and dies
 * with its parent). The cluster secret travels in the child's environment, never on its command line.
 *
 * Restart policy: a worker that exits unexpectedly is reported, the gateway fails its in-flight requests at once (its
 * control connection breaks), and the worker is started again on the same addresses, at most LIMITS.workerRestartsMax
 * times; the gateway reconnects to it by itself.
 */
import { type ChildProcess, fork } from 'node:child_process';
import type { LogSink } from '../engine/inference-worker.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { WorkerRole } from './control-protocol.js';

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

export interface SupervisedSpec {
  name: string;
  role: WorkerRole;
  /** CLI arguments after the role; the supervisor adds --name and the listen addresses */
  args: readonly string[];
  /** extra environment of this worker (tests only: fault injection, the capacity-proof bypass) */
  env?: Readonly<Record<string, string>>;
}

export interface SupervisorOptions {
  cliPath: string;
  /** the environment of every child (the cluster secret is in it) */
  env: NodeJS.ProcessEnv;
  host: string;
  readyTimeoutMs: number;
  /** the children's stdout: shown, or dropped (tests) */
  stdout: 'inherit' | 'ignore';
  log: LogSink;
  /** called on each unexpected exit, after it was logged */
  onExit?: (name: string, code: number | null, signal: NodeJS.Signals | null) => void;
}

interface Supervised {
  spec: SupervisedSpec;
  child: ChildProcess;
  ready: WorkerReady;
  restarts: number;
}

export class Supervisor {
  private readonly workers = new Map<string, Supervised>();
  private closing = false;

  constructor(private readonly options: SupervisorOptions) {}

  /** Starts a worker and resolves with its addresses once it listens (or rejects with its exit). */
  async start(spec: SupervisedSpec): Promise<WorkerReady> {
    const listen = [`--control-listen`, `${this.options.host}:0`];
    if (spec.role === 'decode') listen.push('--transfer-listen', `${this.options.host}:0`);
    const { child, ready } = await this.spawn(spec, listen);
    this.workers.set(spec.name, { spec, child, ready, restarts: 0 });
    this.watch(spec.name, child);
    return ready;
  }

  pid(name: string): number | undefined {
    return this.workers.get(name)?.child.pid;
  }

  /** Tests: kill a worker the hard way. */
  kill(name: string, signal: NodeJS.Signals = 'SIGKILL'): void {
    this.workers.get(name)?.child.kill(signal);
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(
      [...this.workers.values()].map(
        ({ child }) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
            child.once('exit', () => {
              clearTimeout(force);
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
  }

  private spawn(spec: SupervisedSpec, listen: readonly string[]): Promise<{ child: ChildProcess; ready: WorkerReady }> {
    const child = fork(this.options.cliPath, [spec.role, ...spec.args, '--name', spec.name, ...listen], {
      env: { ...this.options.env, ...spec.env },
      stdio: ['ignore', this.options.stdout, 'inherit', 'ipc'],
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(
          new KvfenceError(
            'worker_unavailable',
            `worker ${spec.name} did not start within ${this.options.readyTimeoutMs} ms`,
          ),
        );
      }, this.options.readyTimeoutMs);
      const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
        clearTimeout(timer);
        reject(
          new KvfenceError(
            'worker_unavailable',
            `worker ${spec.name} exited during startup (code ${code}, signal ${signal})`,
          ),
        );
      };
      child.once('exit', onExit);
      child.on('message', (message: unknown) => {
        if (!isWorkerReady(message)) return;
        clearTimeout(timer);
        child.off('exit', onExit);
        resolve({ child, ready: message });
      });
    });
  }

  private watch(name: string, child: ChildProcess): void {
    child.once('exit', (code, signal) => {
      const w = this.workers.get(name);
      if (this.closing || w === undefined || w.child !== child) return;
      this.options.log.error({ worker: name, code, signal }, 'worker exited; its in-flight requests fail');
      this.options.onExit?.(name, code, signal);
      if (w.restarts >= LIMITS.workerRestartsMax) {
        this.options.log.error({ worker: name }, `worker restarted ${w.restarts} times; not restarting it again`);
        return;
      }
      w.restarts++;
      const listen = ['--control-listen', w.ready.control];
      if (w.ready.transfer !== undefined) listen.push('--transfer-listen', w.ready.transfer);
      this.spawn(w.spec, listen).then(
        ({ child: next, ready }) => {
          if (this.closing) {
            next.kill('SIGTERM');
            return;
          }
          w.child = next;
          w.ready = ready;
          this.options.log.info({ worker: name, restarts: w.restarts }, 'worker restarted');
          this.watch(name, next);
        },
        (error: unknown) => this.options.log.error({ worker: name, err: String(error) }, 'worker restart failed'),
      );
    });
  }
}
