// SIGHUP from the start of the process: ignored (and said so) while starting or draining, where node's default would
// end the process undrained; a key-file reload while serving, a bad file reported with the table kept.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { Hangup } from './hangup.js';

test('a SIGHUP is ignored while starting and draining, and reloads the key file while serving', () => {
  const lines: string[] = [];
  const before = process.listenerCount('SIGHUP');
  const hangup = new Hangup((line) => lines.push(line));
  try {
    process.emit('SIGHUP');
    let reloads = 0;
    hangup.serving({
      reloadKeys: () => {
        reloads++;
        if (reloads === 2) throw new KvfenceError('invalid_argument', 'keys.json is not JSON');
        return '2 tenants reloaded from keys.json';
      },
    });
    process.emit('SIGHUP');
    process.emit('SIGHUP');
    hangup.ignore('the server is draining');
    process.emit('SIGHUP');
    assert.deepEqual(lines, [
      'kvfence: SIGHUP ignored: the server is starting',
      'kvfence: 2 tenants reloaded from keys.json',
      'kvfence: key file NOT reloaded: keys.json is not JSON',
      'kvfence: SIGHUP ignored: the server is draining',
    ]);
  } finally {
    for (const listener of process.listeners('SIGHUP').slice(before)) process.off('SIGHUP', listener);
  }
});
