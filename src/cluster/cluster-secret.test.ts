// Secret files (the cluster secret, the admin token) get one policy: a warning when every user may read or write the
// file; none for group read, which is how Kubernetes mounts a secret for the pod's fsGroup (deploy/: 0440).
import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDirectory } from '../../test/helpers/temp.js';
import { AdminToken } from '../gateway/admin-token.js';
import { loadClusterSecret } from './cluster-secret.js';

test('a secret file open to every user is warned of, the cluster secret and the admin token alike; group read is fine', () => {
  const dir = tempDirectory('kvfence-secret-');
  const secretFile = join(dir, 'secret');
  const tokenFile = join(dir, 'token');
  writeFileSync(secretFile, 'k'.repeat(32));
  writeFileSync(tokenFile, 'admin-token-0123456789');
  const warnings = (mode: number) => {
    chmodSync(secretFile, mode);
    chmodSync(tokenFile, mode);
    const said: string[] = [];
    const { warning } = loadClusterSecret(secretFile, {});
    if (warning !== undefined) said.push(warning);
    AdminToken.fromFile(tokenFile, (line) => said.push(line));
    return said;
  };
  assert.deepEqual(warnings(0o600), []);
  assert.deepEqual(warnings(0o440), [], "Kubernetes' secret mounts: no warning no one can act on");
  const open = warnings(0o644);
  assert.equal(open.length, 2);
  assert.match(open[0]!, /the cluster secret file .*secret is open to every user \(mode 644\); chmod o-rwx it/);
  assert.match(open[1]!, /WARNING: the admin token file .*token is open to every user \(mode 644\)/);
});
