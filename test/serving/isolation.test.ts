// Isolation under load, end to end over HTTP: noninterference (I7), early rejection (I2), no lost pages (I8), tenant
// page quotas, and an ownership violation that aborts one request with a 500 and an incident record (I3).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { complete, noninterferenceSuite, tokens } from './isolation-suite.js';
import {
  adminMetrics,
  assertPoolWhole,
  MODEL_ID,
  post,
  startTestServer,
  waitFor,
  writeAdminTokenFile,
  writeKeyFile,
} from './serve-helpers.js';

noninterferenceSuite('colocated', async (keyFile) => {
  const server = await startTestServer({
    apiKeysPath: keyFile,
    kvPages: 160,
    runningMax: 16,
    prefillChunk: 24,
    stepTokens: 96,
  });
  return {
    url: server.url,
    pagesTotal: 160,
    reservationCount: async () => server.worker.pool.reservationCount,
    idle: async () => !server.worker.engine.hasWork,
    assertPoolsWhole: async () => assertPoolWhole(server),
    close: () => server.close(),
  };
});

describe('tenant page quota', () => {
  let server: RunningServer;
  before(async () => {
    // 48 pages; each tenant may hold 24: a 256-token request needs 16, so the flood runs one at a time
    server = await startTestServer({
      apiKeysPath: writeKeyFile(['flood', 'quiet']),
      kvPages: 48,
      tenantKvPages: 24,
      queueTimeoutMs: 30_000,
    });
  });
  after(async () => {
    await server?.close();
  });

  test('a tenant flooding long prompts cannot make another tenant’s short request fail or wait for it', async () => {
    let floodPagesMax = 0;
    const watch = setInterval(() => {
      floodPagesMax = Math.max(floodPagesMax, server.worker.pool.pagesOfTenant('flood'));
    }, 1);
    try {
      const flood = Array.from({ length: 8 }, (_, i) => complete(server, 'flood', tokens(200, i), 50));
      // the flood waits at its tenant's quota: in the gateway's tenant gate, or in the engine's queue
      const waiting = () => server.gateway.gate.waitingCount + server.worker.stats().waiting;
      await waitFor(() => waiting() >= 5, 'the flood to queue up');
      const started = performance.now();
      const quiet = await complete(server, 'quiet', tokens(5, 99), 3);
      const quietMs = performance.now() - started;
      assert.equal(quiet.logprobs.length, 3);
      assert.ok(waiting() >= 1, `the quiet request finished while the flood still waited (${quietMs.toFixed(0)} ms)`);
      const answers = await Promise.all(flood);
      assert.equal(answers.length, 8);
    } finally {
      clearInterval(watch);
    }
    assert.ok(floodPagesMax <= 24, `the flood held at most its quota (${floodPagesMax} pages)`);
    assertPoolWhole(server);
  });
});

describe('ownership violation', () => {
  let server: RunningServer;
  before(async () => {
    server = await startTestServer({
      apiKeysPath: writeKeyFile(['mallory', 'alice']),
      adminTokenFile: writeAdminTokenFile(),
    });
  });
  after(async () => {
    await server?.close();
  });

  test('a request reading another tenant’s page gets 500 kv_isolation_violation; the other runs on; an incident is on disk', async () => {
    const alicePrompt = tokens(30, 5);
    const aliceAlone = await complete(server, 'alice', alicePrompt, 60);
    server.worker.pause();
    const mallory = post(
      server,
      '/v1/completions',
      { model: MODEL_ID, prompt: 'x', max_tokens: 100, temperature: 0 },
      'mallory',
    );
    const alice = complete(server, 'alice', alicePrompt, 60);
    await waitFor(() => server.worker.stats().waiting === 2, 'both requests queued');
    server.worker.resume();
    await waitFor(
      () =>
        server.worker.engine.runningRequestsOf('mallory').length === 1 &&
        server.worker.engine.runningRequestsOf('alice').length === 1,
      'both running',
    );
    server.worker.pause();
    const malloryId = server.worker.engine.runningRequestsOf('mallory')[0]!;
    const aliceId = server.worker.engine.runningRequestsOf('alice')[0]!;
    const table = server.worker.engine.runningTable(malloryId)!;
    const stolen = server.worker.engine.runningTable(aliceId)!.pages[0]!;
    table.pages[0] = stolen; // mallory's page table now points at alice's first page
    server.worker.resume();

    const r = await mallory;
    assert.equal(r.status, 500);
    const error = (r.json as { error: { code: string; message: string; type: string } }).error;
    assert.equal(error.code, 'kv_isolation_violation');
    assert.equal(error.type, 'server_error');
    assert.ok(!error.message.includes('alice') && !error.message.includes(aliceId), 'the error names no other tenant');
    assert.deepEqual(await alice, aliceAlone, 'alice is undisturbed');

    const [incident] = server.incidents.list();
    assert.ok(incident !== undefined, 'an incident was recorded');
    assert.equal(incident.tenant, 'mallory');
    assert.equal(incident.request, malloryId);
    assert.equal(incident.page, stolen);
    assert.equal(incident.pageOwnerTenant, 'alice');
    assert.equal(incident.pageOwnerRequest, aliceId);
    assert.ok(Math.abs(incident.timeMs - Date.now()) < 60_000);
    const metrics = await adminMetrics(server);
    assert.match(metrics, /kvfence_isolation_incidents_total\{tenant="mallory"\} 1/);
    assertPoolWhole(server);
  });
});
