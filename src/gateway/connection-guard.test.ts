import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { addressKey, ConnectionGuard } from './connection-guard.js';

test('addresses are counted per IPv4 address and per IPv6 /64', () => {
  assert.equal(addressKey('10.1.2.3'), '10.1.2.3');
  assert.equal(addressKey('::ffff:10.1.2.3'), '10.1.2.3');
  assert.equal(addressKey('2001:db8:0:1:aaaa::1'), '2001:db8:0:1::/64');
  assert.equal(addressKey('2001:0db8:0000:0001:ffff:ffff:ffff:ffff'), '2001:db8:0:1::/64');
  assert.equal(addressKey('2001:db8::1'), '2001:db8:0:0::/64');
  assert.equal(addressKey('::1'), '0:0:0:0::/64');
  assert.equal(addressKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
});

/** A socket as the guard sees it: an address, `destroy`, a `close` event. */
function fakeSocket(remoteAddress: string): Socket & { destroyedByGuard: boolean } {
  const s = Object.assign(new EventEmitter(), {
    remoteAddress,
    destroyedByGuard: false,
    destroy() {
      s.destroyedByGuard = true;
      s.emit('close');
    },
  });
  return s as unknown as Socket & { destroyedByGuard: boolean };
}

test('the per-address bound, authentication and close release, and the address table cap', () => {
  const refused: string[] = [];
  const guard = new ConnectionGuard({
    perAddressMax: 2,
    addressesMax: 2,
    onRefused: (a, why) => refused.push(`${a} ${why}`),
  });
  const a1 = fakeSocket('10.0.0.1');
  const a2 = fakeSocket('10.0.0.1');
  const a3 = fakeSocket('10.0.0.1');
  for (const s of [a1, a2, a3]) guard.accept(s);
  assert.deepEqual(
    [a1, a2, a3].map((s) => s.destroyedByGuard),
    [false, false, true],
  );
  assert.equal(guard.count, 2);
  guard.authenticated(a1);
  guard.authenticated(a1); // twice: counted once
  a1.emit('close'); // an authenticated connection closing changes nothing
  assert.equal(guard.count, 1);
  const a4 = fakeSocket('10.0.0.1');
  guard.accept(a4);
  assert.equal(a4.destroyedByGuard, false);
  guard.accept(fakeSocket('10.0.0.2'));
  const c = fakeSocket('10.0.0.3');
  guard.accept(c); // a third address: the table is full
  assert.equal(c.destroyedByGuard, true);
  assert.deepEqual(refused, ['10.0.0.1 per_address', '10.0.0.3 table_full']);
  a2.emit('close');
  a4.emit('close'); // 10.0.0.1 leaves the table
  const d = fakeSocket('10.0.0.3');
  guard.accept(d);
  assert.equal(d.destroyedByGuard, false);
  assert.equal(guard.count, 2);
});
