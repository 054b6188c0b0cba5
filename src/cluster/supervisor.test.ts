// The supervisor stops every child it forked when it closes, those still starting included: a cluster whose startup
// failed (one worker exits) closes at once, while the others may not have reported ready yet.
import assert from 'node:assert/strict';
import { type ChildProcess, type ForkOptions, fork } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDirectory } from '../../test/helpers/temp.js';
import { until } from '../../test/transfer/harness.js';
import { Supervisor } from './supervisor.js';
import type { WorkerConfig } from './worker-config.js';

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

/** A supervisor of test/helpers/startup-worker.js in `dir`, with `overrides` */
function supervisorFor(dir: string, overrides: Partial<ConstructorParameters<typeof Supervisor>[0]> = {}): Supervisor {
  return new Supervisor({
    program: fileURLToPath(new URL('../../test/helpers/startup-worker.js', import.meta.url)),
    programArgs: [dir],
    secretHex: '00',
    readyTimeoutMs: 30_000,
    restartBackoffMs: 100,
    restartBackoffMaxMs: 1_000,
    restartWindowMs: 1_000,
    stdout: 'ignore',
    log: quiet,
    ...overrides,
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('close stops the children still starting, not only the ready ones', async () => {
  const dir = tempDirectory('kvfence-supervisor-');
  const supervisor = supervisorFor(dir);
  const config = (name: string) => ({ name }) as unknown as WorkerConfig;
  const pidOf = (name: string) => Number(readFileSync(join(dir, `${name}.pid`), 'utf8'));
  await supervisor.start(config('ready'));
  const starting = supervisor.start(config('starting'));
  starting.catch(() => {});
  await assert.rejects(supervisor.start(config('fails')), /exited during startup/);
  await until('the starting worker to be up', () => existsSync(join(dir, 'starting.pid')), 10_000);
  // as a failed cluster startup does: close at once
  await supervisor.close();
  await assert.rejects(starting, /exited during startup/);
  for (const name of ['ready', 'starting']) {
    const pid = pidOf(name);
    await until(`worker ${name} (pid ${pid}) to be gone`, () => !alive(pid), 10_000);
  }
});

test('a restart whose process cannot be started (no file handles, no processes) backs off and tries again', async () => {
  // node's fork then throws, or hands back a child without its IPC channel that emits 'error' and never 'exit': both
  // ended the supervisor, the gateway and every healthy worker with it
  const dir = tempDirectory('kvfence-supervisor-');
  const errors: string[] = [];
  const log = { ...quiet, error: (fields: object) => errors.push((fields as { err?: string }).err ?? '') };
  let failures = 0;
  const failing = (program: string, args: readonly string[], options: ForkOptions): ChildProcess => {
    if (failures === 0) return fork(program, args, options);
    failures--;
    if (failures % 2 === 1) throw Object.assign(new Error('spawn ENOMEM'), { code: 'ENOMEM' });
    const child = Object.assign(new EventEmitter(), { pid: undefined, kill: () => false }) as unknown as ChildProcess;
    setImmediate(() => child.emit('error', Object.assign(new Error('spawn EMFILE'), { code: 'EMFILE' })));
    return child;
  };
  const supervisor = supervisorFor(dir, { restartBackoffMs: 20, restartBackoffMaxMs: 100, log, fork: failing });
  try {
    await supervisor.start({ name: 'ready' } as unknown as WorkerConfig);
    failures = 3; // a child without its IPC channel (EMFILE), a throw (ENOMEM), the first again; then starts work
    supervisor.kill('ready');
    await until('the worker to be restarted', () => supervisor.status()[0]!.restarts === 1, 10_000);
    assert.deepEqual(
      errors.filter((e) => e.includes('could not be started')).map((e) => /could not be started: (.*)/.exec(e)![1]),
      ['it has no IPC channel', 'spawn ENOMEM', 'it has no IPC channel'],
    );
  } finally {
    await supervisor.close();
  }
});

test('once the server stops, a worker that exits is not started again (a Ctrl-C reaches every worker too)', async () => {
  const dir = tempDirectory('kvfence-supervisor-');
  const infos: string[] = [];
  const supervisor = supervisorFor(dir, {
    restartBackoffMs: 10,
    restartBackoffMaxMs: 100,
    log: { ...quiet, info: (_: object, message: string) => infos.push(message) },
  });
  try {
    await supervisor.start({ name: 'ready' } as unknown as WorkerConfig);
    supervisor.stopRestarting();
    const pid = supervisor.pid('ready')!;
    supervisor.kill('ready', 'SIGINT');
    await until('the worker to exit', () => !alive(pid), 10_000);
    await new Promise((resolve) => setTimeout(resolve, 200)); // 20 backoffs
    assert.deepEqual([supervisor.status()[0]!.restarts, infos], [0, []]);
  } finally {
    await supervisor.close();
  }
});
