import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { DEV_TENANT, hashApiKey, parseKeyFile, TenantDirectory } from './tenants.js';

const LIMITS_DEFAULT = { concurrentRequestsMax: 8, kvPagesMax: 128 };

test('keys map to tenants through their hashes only', () => {
  const file = parseKeyFile(
    {
      keys: [
        { tenant: 'acme', sha256: hashApiKey('k-acme-0123456789') },
        { tenant: 'globex', sha256: hashApiKey('k-globex-012345678') },
      ],
      tenants: { acme: { kvPagesMax: 64 } },
    },
    'keys.json',
  );
  const dir = new TenantDirectory(file, LIMITS_DEFAULT);
  assert.equal(dir.authenticate('Bearer k-acme-0123456789'), 'acme');
  assert.equal(dir.authenticate('Bearer k-globex-012345678'), 'globex');
  assert.equal(dir.authenticate('Bearer k-acme-012345678'), undefined);
  assert.equal(dir.authenticate(undefined), undefined);
  assert.equal(dir.authenticate('k-acme-0123456789'), undefined, 'the Bearer scheme is required');
  assert.deepEqual(file.tenants.get('acme'), { kvPagesMax: 64 });
  assert.deepEqual(dir.limitsOf('acme'), { concurrentRequestsMax: 8, kvPagesMax: 64 }, 'the file overrides a default');
  assert.deepEqual(dir.limitsOf('globex'), LIMITS_DEFAULT, 'no entry: the defaults');
  assert.equal(dir.smallestPageQuota(), 64);
});

test('a key file with a plaintext key, a bad hash or no keys is refused; no file is dev mode', () => {
  const refused = (json: unknown) => assert.throws(() => parseKeyFile(json, 'k.json'), KvfenceError);
  refused({ keys: [{ tenant: 'a', key: 'secret', sha256: hashApiKey('secret') }] });
  refused({ keys: [{ tenant: 'a', sha256: 'abc' }] });
  refused({ keys: [] });
  refused({ keys: [{ tenant: 'bad tenant', sha256: hashApiKey('x') }] });
  const dev = new TenantDirectory(undefined, LIMITS_DEFAULT);
  assert.ok(dev.devMode);
  assert.equal(dev.authenticate(undefined), DEV_TENANT);
});

test('gateways sharing a cluster each enforce their share of every limit, so the limits hold cluster-wide', () => {
  const file = (tenants: object) =>
    parseKeyFile(
      {
        keys: [
          { tenant: 'acme', sha256: hashApiKey('k-acme-0123456789') },
          { tenant: 'globex', sha256: hashApiKey('k-globex-012345678') },
        ],
        tenants,
      },
      'keys.json',
    );
  const dir = new TenantDirectory(file({ acme: { concurrentRequestsMax: 5, kvPagesMax: 64 } }), LIMITS_DEFAULT, 2);
  assert.deepEqual(dir.limitsOf('acme'), { concurrentRequestsMax: 2, kvPagesMax: 32 }, 'rounded down: 2 + 2 ≤ 5');
  assert.deepEqual(dir.limitsOf('globex'), { concurrentRequestsMax: 4, kvPagesMax: 64 });
  assert.deepEqual(dir.clusterLimitsOf('acme'), { concurrentRequestsMax: 5, kvPagesMax: 64 }, 'what workers check');
  assert.equal(dir.smallestPageQuota(), 32, 'the capacity proof checks the context against a share');
  // a limit that leaves some gateway nothing is refused, at startup and at a reload (the old table stays)
  const tooSmall = file({ acme: { concurrentRequestsMax: 1 } });
  assert.throws(
    () => new TenantDirectory(tooSmall, LIMITS_DEFAULT, 2),
    (e: KvfenceError) =>
      e.code === 'invalid_argument' && /tenant acme: concurrentRequestsMax 1 cannot be split/.test(e.message),
  );
  assert.throws(() => dir.replace(tooSmall), /cannot be split across 2 gateways/);
  assert.deepEqual(dir.limitsOf('acme'), { concurrentRequestsMax: 2, kvPagesMax: 32 });
  assert.throws(
    () => new TenantDirectory(undefined, { concurrentRequestsMax: 3, kvPagesMax: 128 }, 4),
    /the default \(--tenant-\* flags\): concurrentRequestsMax 3/,
  );
  // one gateway: the limits as written
  assert.deepEqual(new TenantDirectory(tooSmall, LIMITS_DEFAULT).limitsOf('acme'), {
    concurrentRequestsMax: 1,
    kvPagesMax: 128,
  });
});
