import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDirectory } from '../../test/helpers/temp.js';
import { IncidentStore } from './incident-store.js';

test('an incident record survives the process being killed right after writing it', () => {
  const path = join(tempDirectory(), 'incidents.sqlite');
  const moduleUrl = new URL('./incident-store.js', import.meta.url).href;
  const script = `
    const { IncidentStore } = await import(${JSON.stringify(moduleUrl)});
    const store = new IncidentStore(${JSON.stringify(path)});
    store.record({ request: 'r1', tenant: 'mallory', timeMs: 1234, violation: {
      reader: { tenant: 'mallory', request: 'r1' }, page: 7, pageOwner: { tenant: 'alice', request: 'r0' },
      expectedEpoch: 3, pageEpoch: 4, reason: 'page owned by someone else' } });
    process.kill(process.pid, 'SIGKILL');`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 30_000 });
  assert.equal(child.signal, 'SIGKILL', child.stderr.toString());
  const store = new IncidentStore(path);
  try {
    const [row] = store.list();
    assert.deepEqual(row, {
      id: 1,
      timeMs: 1234,
      request: 'r1',
      tenant: 'mallory',
      page: 7,
      pageOwnerTenant: 'alice',
      pageOwnerRequest: 'r0',
      pageEpoch: 4,
      expectedEpoch: 3,
      reason: 'page owned by someone else',
    });
  } finally {
    store.close();
  }
});
