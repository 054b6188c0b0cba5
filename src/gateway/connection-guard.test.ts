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

test('the per-address bound, authentication and close release, and the address table cap (the oldest goes)', () => {
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
  const b = fakeSocket('10.0.0.2');
  guard.accept(b);
  const c = fakeSocket('10.0.0.3');
  guard.accept(c); // a third address, the table full: 10.0.0.1's connections, waiting longest, make room
  assert.deepEqual(
    [a2, a4, b, c].map((s) => s.destroyedByGuard),
    [true, true, false, false],
  );
  assert.deepEqual(refused, ['10.0.0.1 per_address', '10.0.0.1 table_full', '10.0.0.1 table_full']);
  assert.equal(guard.count, 2);
  // a tenant's new connection in a table a stranger keeps full of silent ones: it gets in, and out of the count once
  // its first request authenticates; only strangers' connections were evicted
  const strangers = Array.from({ length: 2 }, (_, i) => fakeSocket(`10.9.0.${i}`));
  for (const s of strangers) guard.accept(s);
  const tenant = fakeSocket('10.0.0.7');
  guard.accept(tenant);
  assert.equal(tenant.destroyedByGuard, false);
  guard.authenticated(tenant);
  assert.deepEqual(
    [b, c, ...strangers].map((s) => s.destroyedByGuard),
    [true, true, true, false],
  );
  assert.equal(guard.count, 1);
});
