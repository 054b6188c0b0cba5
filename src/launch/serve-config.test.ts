// The KV pool's size from the flags: one pool is one typed array, so a size past what node allocates is refused at
// startup naming the flags (it failed as V8's "Invalid typed array length").
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadTestModel } from '../../test/helpers/models.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { LIMITS } from '../util/limits.js';
import { resolvePageCount } from './serve-config.js';

test('a KV pool larger than one pool can be is refused, naming the flags and the most this model allows', () => {
  const model = loadTestModel({ preset: 'tiny', arch: 'llama', dtype: 'f32', seed: 3 });
  const c = model.config;
  const perPage = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, 16).valuesPerPage;
  const most = Math.floor(LIMITS.kvPoolValuesMax / perPage);
  assert.equal(resolvePageCount(model, 16, most), most);
  assert.throws(
    () => resolvePageCount(model, 16, most + 1),
    new RegExp(`at most ${most} pages .*--kv-memory or --kv-pages`),
  );
  const bytes = (most + 1) * perPage * 2;
  assert.throws(() => resolvePageCount(model, 16, undefined, String(bytes)), /is more than one pool holds/);
  assert.equal(resolvePageCount(model, 16, undefined, '1MiB') > 0, true);
});
