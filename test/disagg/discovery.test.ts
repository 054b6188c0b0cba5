// Worker discovery under load: the gateway finds its workers through a resolver whose answers change while three
// tenants keep sending requests — two new workers appear (the gateway connects and routes to them), then the first
// two disappear (the gateway drains them: their requests end first, then it lets go). No request fails, every answer
// is the one the request gets alone (I7), the new workers really served, and the retired ones are released.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { WorkerRole } from '../../src/cluster/control-protocol.js';
import type { WorkerResolver } from '../../src/cluster/worker-discovery.js';
import { type RunningGateway, startGateway } from '../../src/launch/gateway-server.js';
import { workerSettingsOf } from '../../src/launch/serve-config.js';
import { loadModel } from '../../src/model/load-model.js';
import { InProcessWorkers } from '../helpers/in-process-worker.js';
import { tempDirectory } from '../helpers/temp.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, testServeConfig, waitFor, writeKeyFile } from '../serving/serve-helpers.js';
import { type GreedyOutcome, greedyCompletion } from './cluster-helpers.js';

const TENANTS = ['t0', 't1', 't2'];
const PROMPTS = [tokens(20, 1), tokens(33, 2), tokens(47, 3)];
const MAX_TOKENS = 12;

const dir = tempDirectory('kvfence-discovery-');
const serve = testServeConfig({ apiKeysPath: writeKeyFile(TENANTS) });
const model = loadModel(serve.modelPath!);
const workers = new InProcessWorkers(model, workerSettingsOf(serve, 128), new Uint8Array(32).fill(7), dir);
/** what the fake DNS answers now, per role */
const answers: Record<WorkerRole, string[]> = { prefill: [], decode: [] };
let lookups = 0;
const resolver = (role: WorkerRole): WorkerResolver => ({
  source: `fake-${role}`,
  dynamic: true,
  resolve: async () => {
    lookups++;
    return [...answers[role]];
  },
});
let gateway: RunningGateway;

const ask = (tenant: string, prompt: number[]) => greedyCompletion(gateway, tenant, prompt, MAX_TOKENS);

before(async () => {
  const [p0, d0] = [await workers.start('prefill', 'prefill-a'), await workers.start('decode', 'decode-a')];
  answers.prefill = [p0.controlAddress];
  answers.decode = [d0.controlAddress];
  gateway = await startGateway({
    ...serve,
    tenantConcurrentMax: 8,
    modelPath: model.path,
    modelName: MODEL_ID,
    resolvers: { prefill: resolver('prefill'), decode: resolver('decode') },
    dnsRefreshMs: 100,
    secret: workers.secret,
    connectTimeoutMs: 10_000,
  });
});

after(async () => {
  await gateway?.close();
  await workers.close();
});

test('workers added and removed during load: no request lost, answers as alone, the removed ones let go', async () => {
  const solo = await Promise.all(PROMPTS.map((p) => ask('t0', p)));
  for (const s of solo) assert.equal(s.status, 200, s.text);

  const outcomes: { prompt: number; outcome: GreedyOutcome }[] = [];
  let running = true;
  const load = TENANTS.map(async (tenant, t) => {
    for (let i = t; running; i++) {
      const prompt = i % PROMPTS.length;
      outcomes.push({ prompt, outcome: await ask(tenant, PROMPTS[prompt]!) });
    }
  });
  const served = async (n: number) => {
    const until = outcomes.length + n;
    await waitFor(() => outcomes.length >= until, `${n} more requests served`);
  };

  await served(6);
  // two workers appear: the gateway connects to them and routes to them
  const [p1, d1] = [await workers.start('prefill', 'prefill-b'), await workers.start('decode', 'decode-b')];
  answers.prefill = [answers.prefill[0]!, p1.controlAddress];
  answers.decode = [answers.decode[0]!, d1.controlAddress];
  await waitFor(
    () => gateway.dispatcher.workers().filter((w) => w.up).length === 4,
    'the gateway to route to the 4 workers',
  );
  await served(12);
  // the first two disappear: drained (their requests end first), then let go
  answers.prefill = [p1.controlAddress];
  answers.decode = [d1.controlAddress];
  await waitFor(() => gateway.dispatcher.workers().length === 2, 'the gateway to let go of the removed workers');
  assert.deepEqual(
    gateway.dispatcher
      .workers()
      .map((w) => w.name)
      .sort(),
    ['decode-b', 'prefill-b'],
  );
  await served(9);
  running = false;
  await Promise.all(load);

  assert.ok(outcomes.length >= 27, `${outcomes.length} requests during the changes`);
  for (const { prompt, outcome } of outcomes) {
    assert.equal(outcome.status, 200, outcome.text);
    assert.deepEqual(outcome, solo[prompt], 'the answer it gets alone (I7)');
  }
  // the new pair served: every request after the removal went there
  const [prefillStats, decodeStats] = await gateway.dispatcher.poolStats();
  assert.ok(prefillStats!.reservations > 0 && decodeStats!.reservations >= 9, JSON.stringify(decodeStats));
  assert.equal(decodeStats!.pagesFree, decodeStats!.pagesTotal, 'the new decode pool is whole');
  // the gateway closed its connections to the removed workers: they drain at once (nothing held, nobody connected)
  const started = performance.now();
  await Promise.all([workers.started[0]!.drain(5_000), workers.started[1]!.drain(5_000)]);
  assert.ok(performance.now() - started < 1_000, `drained in ${(performance.now() - started).toFixed(0)} ms`);
  workers.started.splice(0, 2);
  // each role's answers changed twice after the first, so each was asked at least three times (more as time passes)
  assert.ok(lookups >= 6, `the resolver was asked again and again (${lookups})`);
});
