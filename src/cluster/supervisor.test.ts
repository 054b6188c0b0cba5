// The supervisor stops every child it forked when it closes, those still starting included: a cluster whose startup
// failed (one worker exits) closes at once, while the others may not have reported ready yet.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDirectory } from '../../test/helpers/temp.js';
import { until } from '../../test/transfer/harness.js';
import { Supervisor } from './supervisor.js';
import type { WorkerConfig } from './worker-config.js';

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

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
  const supervisor = new Supervisor({
    program: fileURLToPath(new URL('../../test/helpers/startup-worker.js', import.meta.url)),
    programArgs: [dir],
    secretHex: '00',
    readyTimeoutMs: 30_000,
    restartBackoffMs: 100,
    restartBackoffMaxMs: 1_000,
    restartWindowMs: 1_000,
    stdout: 'ignore',
    log: quiet,
  });
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
