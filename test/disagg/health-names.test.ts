// /health names each worker by its hello's name, and keeps that name once the worker is down: the worker that is
// missing is the one named, not `decode-0` (the name a link has before any hello). These workers' names are not those
// fallbacks, so a forgotten name shows. Workers and gateway run in this process.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import type { WorkerRole } from '../../src/cluster/control-protocol.js';
import { type RunningWorker, WORKER_DEFAULTS } from '../../src/cluster/worker-config.js';
import { IncidentStore } from '../../src/incidents/incident-store.js';
import { type RunningGateway, startGateway } from '../../src/launch/gateway-server.js';
import { workerSettingsOf } from '../../src/launch/serve-config.js';
import { startWorker } from '../../src/launch/start-worker.js';
import { loadModel } from '../../src/model/load-model.js';
import { tempDirectory } from '../helpers/temp.js';
import { MODEL_ID, testServeConfig } from '../serving/serve-helpers.js';

const dir = tempDirectory('kvfence-health-names-');
const serve = testServeConfig();
const model = loadModel(serve.modelPath!);
const secret = new Uint8Array(32).fill(9);
const incidents = new IncidentStore(join(dir, 'incidents.sqlite'));
const workers: RunningWorker[] = [];
let gateway: RunningGateway;

async function newWorker(role: WorkerRole, name: string): Promise<RunningWorker> {
  const worker = await startWorker(
    {
      role,
      name,
      modelPath: model.path,
      modelName: MODEL_ID,
      backend: 'reference',
      settings: workerSettingsOf(serve, 128),
      controlListen: '127.0.0.1:0',
      ...(role === 'decode' ? { transferListen: '127.0.0.1:0' } : {}),
      transferTimeoutMs: 10_000,
      idleTimeoutMs: 3_000,
      handshakeTimeoutMs: WORKER_DEFAULTS.handshakeTimeoutMs,
      incidentsDb: join(dir, 'unused.sqlite'),
      logLevel: 'silent',
    },
    secret,
    { model, incidents, log: pino({ level: 'silent' }) },
  );
  workers.push(worker);
  return worker;
}

before(async () => {
  const [prefill, decode] = [await newWorker('prefill', 'prefill-east'), await newWorker('decode', 'decode-east')];
  gateway = await startGateway({
    ...serve,
    modelPath: model.path,
    modelName: MODEL_ID,
    prefill: [prefill.controlAddress],
    decode: [decode.controlAddress],
    secret,
    connectTimeoutMs: 10_000,
  });
});

after(async () => {
  await gateway?.close();
  for (const w of workers) await w.close();
  incidents.close();
});

async function health(): Promise<{ status: number; workers: unknown[][] }> {
  const response = await fetch(`${gateway.url}/health`, { signal: AbortSignal.timeout(10_000) });
  const json = (await response.json()) as { workers: Record<string, unknown>[] };
  return { status: response.status, workers: json.workers.map((w) => [w['name'], w['role'], w['up']]) };
}

test('a worker that went down is listed down under the name its hello gave', async () => {
  assert.deepEqual(await health(), {
    status: 200,
    workers: [
      ['prefill-east', 'prefill', true],
      ['decode-east', 'decode', true],
    ],
  });
  await workers.pop()!.close(); // decode-east
  const deadline = Date.now() + 10_000;
  let down = await health();
  while (down.status === 200 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    down = await health();
  }
  assert.deepEqual(down, {
    status: 503,
    workers: [
      ['prefill-east', 'prefill', true],
      ['decode-east', 'decode', false],
    ],
  });
});
