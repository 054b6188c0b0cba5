// /health names each worker by its hello's name, and keeps that name once the worker is down: the worker that is
// missing is the one named, not `decode-0` (the name a link has before any hello). These workers' names are not those
// fallbacks, so a forgotten name shows. Workers and gateway run in this process.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type RunningGateway, startGateway } from '../../src/launch/gateway-server.js';
import { workerSettingsOf } from '../../src/launch/serve-config.js';
import { loadModel } from '../../src/model/load-model.js';
import { InProcessWorkers } from '../helpers/in-process-worker.js';
import { tempDirectory } from '../helpers/temp.js';
import { MODEL_ID, testServeConfig } from '../serving/serve-helpers.js';

const dir = tempDirectory('kvfence-health-names-');
const serve = testServeConfig();
const model = loadModel(serve.modelPath!);
const workers = new InProcessWorkers(model, workerSettingsOf(serve, 128), new Uint8Array(32).fill(9), dir);
let gateway: RunningGateway;

before(async () => {
  const [prefill, decode] = [
    await workers.start('prefill', 'prefill-east'),
    await workers.start('decode', 'decode-east'),
  ];
  gateway = await startGateway({
    ...serve,
    modelPath: model.path,
    modelName: MODEL_ID,
    prefill: [prefill.controlAddress],
    decode: [decode.controlAddress],
    secret: workers.secret,
    connectTimeoutMs: 10_000,
  });
});

after(async () => {
  await gateway?.close();
  await workers.close();
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
  await workers.started.pop()!.close(); // decode-east
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
