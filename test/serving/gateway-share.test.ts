// With --gateways N each gateway's gate holds 1/N of a tenant's limits, but the workers serve every gateway: a request
// tells them the tenant's cluster-wide page quota, so one gateway's requests never wait on another's share (a worker
// holding a share let a tenant use only 1/N of its quota across the cluster: the second of two 119-page requests
// through two gateways waited 8.7 s for the first).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { GenerationRequest } from '../../src/engine/request.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { MODEL_ID, post, startTestServer, writeKeyFile } from './serve-helpers.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({ apiKeysPath: writeKeyFile(['acme'], { acme: { kvPagesMax: 64 } }), gateways: 2 });
});
after(async () => {
  await server?.close();
});

test('the worker is told the tenant’s cluster-wide page quota, the gate holds this gateway’s share', async () => {
  const seen: GenerationRequest[] = [];
  const worker = server.worker;
  const submit = worker.submit;
  worker.submit = (request, sink) => {
    seen.push(request);
    submit.call(worker, request, sink);
  };
  try {
    const r = await post(server, '/v1/completions', { model: MODEL_ID, prompt: 'hello', max_tokens: 2 }, 'acme');
    assert.equal(r.status, 200, JSON.stringify(r.json));
  } finally {
    worker.submit = submit;
  }
  assert.deepEqual(
    seen.map((r) => r.tenantKvPagesMax),
    [64],
  );
  assert.equal(server.tenants.limitsOf('acme').kvPagesMax, 32, 'the gate: this gateway’s half');
});
