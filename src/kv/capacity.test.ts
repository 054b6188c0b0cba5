import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { parseByteSize, proveCapacity } from './capacity.js';

test('a context that fits is proven as is', () => {
  const p = proveCapacity({ modelContext: 2048, pageCount: 128, pageSize: 16, tenantPagesMin: 128, clamp: false });
  assert.equal(p.provenContext, 2048);
  assert.equal(p.clamped, false);
});

test('a context that does not fit refuses to start, giving both numbers', () => {
  assert.throws(
    () => proveCapacity({ modelContext: 2048, pageCount: 100, pageSize: 16, tenantPagesMin: 100, clamp: false }),
    (e: unknown) =>
      e instanceof KvfenceError &&
      e.code === 'kv_capacity_exceeded' &&
      /2048 tokens/.test(e.message) &&
      /1600 tokens/.test(e.message),
  );
});

test('the smallest tenant quota bounds the context too; clamping advertises what fits, loudly', () => {
  assert.throws(
    () => proveCapacity({ modelContext: 2048, pageCount: 1000, pageSize: 16, tenantPagesMin: 64, clamp: false }),
    /tenant KV quota of 64 pages/,
  );
  const p = proveCapacity({ modelContext: 2048, pageCount: 1000, pageSize: 16, tenantPagesMin: 64, clamp: true });
  assert.equal(p.provenContext, 1024);
  assert.ok(p.clamped);
  assert.match(p.summary, /CLAMPED from 2048 to 1024/);
  assert.equal(
    proveCapacity({
      modelContext: 2048,
      requestedContext: 512,
      pageCount: 32,
      pageSize: 16,
      tenantPagesMin: 32,
      clamp: false,
    }).provenContext,
    512,
  );
});

test('byte sizes', () => {
  assert.equal(parseByteSize('512MiB'), 512 * 2 ** 20);
  assert.equal(parseByteSize('1GB'), 1e9);
  assert.equal(parseByteSize('4096'), 4096);
  assert.throws(() => parseByteSize('lots'), KvfenceError);
});
