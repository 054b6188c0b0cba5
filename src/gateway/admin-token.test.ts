import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { AdminToken } from './admin-token.js';

const dir = mkdtempSync(join(tmpdir(), 'kvfence-admin-token-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const file = (text: string) => {
  const path = join(dir, `token-${files++}`);
  writeFileSync(path, text);
  return path;
};

test('the admin token matches only "Bearer <token>"', () => {
  const token = AdminToken.fromFile(file('  s3cret-admin-token-42\n'));
  assert.equal(token.matches('Bearer s3cret-admin-token-42'), true);
  assert.equal(token.matches('bearer s3cret-admin-token-42 '), true);
  assert.equal(token.matches('Bearer s3cret-admin-token-43'), false);
  assert.equal(token.matches('s3cret-admin-token-42'), false);
  assert.equal(token.matches(undefined), false);
  assert.equal(token.matches('Bearer '), false);
});

test('a missing, short or multi-word token file is refused at startup', () => {
  assert.throws(() => AdminToken.fromFile('/nonexistent/kvfence-admin-token'), { code: 'file_not_found' });
  assert.throws(() => AdminToken.fromFile(file('short\n')), { code: 'invalid_argument' });
  assert.throws(() => AdminToken.fromFile(file('two words of a long token\n')), { code: 'invalid_argument' });
});
