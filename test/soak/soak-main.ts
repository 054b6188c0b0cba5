/**
 * `npm run soak -- --minutes M [--clients N] [--kill-every-s S]`: a disaggregated cluster (1 prefill, 2 decode worker
 * processes) at saturation for M minutes: tenants sending greedy requests whose answers are known (checked token for
 * token against a colocated server's), streams cancelled midway, prompts over the context, bursts past a tenant's
 * concurrency, and a worker killed every S seconds. Reports RSS of every process over time, requests by outcome, wrong
 * answers (must be 0: a 200 with other tokens than the reference), and whether every pool is whole at the end.
 * Exit status 1 on a wrong answer or a pool not whole.
 */
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { startDisaggregatedServer } from '../../src/launch/cluster-server.js';
import { startServer } from '../../src/launch/colocated-server.js';
import { assertClusterPoolsWhole } from '../disagg/cluster-helpers.js';
import { tokens } from '../serving/isolation-suite.js';
import { keyFor, MODEL_ID, type Served, testServeConfig, writeKeyFile } from '../serving/serve-helpers.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '5' },
    clients: { type: 'string', default: '12' },
    'kill-every-s': { type: 'string', default: '60' },
  },
});
const minutes = Number(values.minutes);
const clients = Number(values.clients);
const killEveryMs = Number(values['kill-every-s']) * 1000;

const TENANTS = ['t0', 't1', 't2', 't3'];
const keys = writeKeyFile(TENANTS, { t3: { concurrentRequestsMax: 2 } });
const PROMPTS = Array.from({ length: 16 }, (_, i) => tokens(10 + i * 13, i));

interface Known {
  text: string;
  finish: string;
}

async function completion(server: Served, tenant: string, body: Record<string, unknown>, signal?: AbortSignal) {
  const response = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor(tenant)}` },
    body: JSON.stringify({ model: MODEL_ID, temperature: 0, ...body }),
    signal: signal ?? AbortSignal.timeout(120_000),
  });
  const text = await response.text();
  return { status: response.status, text };
}

function answerOf(body: string): Known {
  const c = (JSON.parse(body) as { choices: { text: string; finish_reason: string }[] }).choices[0]!;
  return { text: c.text, finish: c.finish_reason };
}

const reference = await startServer(testServeConfig({ apiKeysPath: keys }));
const known: Known[] = [];
for (const prompt of PROMPTS)
  known.push(answerOf((await completion(reference, 't0', { prompt, max_tokens: 24 })).text));
await reference.close();

const cluster = await startDisaggregatedServer({
  serve: testServeConfig({ apiKeysPath: keys }),
  prefillCount: 1,
  decodeCount: 2,
  transferTimeoutMs: 10_000,
  idleTimeoutMs: 3_000,
  workerStdout: 'ignore',
});

const outcomes = new Map<string, number>();
const count = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);
let wrong = 0;
const deadline = Date.now() + minutes * 60_000;
let n = 0;

async function client(id: number): Promise<void> {
  while (Date.now() < deadline) {
    const tenant = TENANTS[(id + n++) % TENANTS.length]!;
    const pick = n % 10;
    try {
      if (pick < 6) {
        const i = n % PROMPTS.length;
        const r = await completion(cluster, tenant, { prompt: PROMPTS[i], max_tokens: 24 });
        count(`answer ${r.status}`);
        if (r.status === 200 && JSON.stringify(answerOf(r.text)) !== JSON.stringify(known[i])) {
          wrong++;
          console.error(`WRONG ANSWER for prompt ${i} of ${tenant}: ${r.text}`);
        }
      } else if (pick < 8) {
        const cancel = AbortSignal.timeout(20 + (n % 200));
        const r = await completion(cluster, tenant, { prompt: PROMPTS[n % 8], max_tokens: 40, stream: true }, cancel);
        count(`stream ${r.status}`);
      } else if (pick < 9) {
        const r = await completion(cluster, tenant, { prompt: tokens(300, n), max_tokens: 8 });
        count(`oversize ${r.status}`);
      } else {
        const burst = await Promise.all(
          [0, 1, 2, 3].map(() => completion(cluster, 't3', { prompt: PROMPTS[0], max_tokens: 24 })),
        );
        for (const r of burst) count(`burst ${r.status}`);
      }
    } catch (error) {
      count(error instanceof Error && error.name === 'TimeoutError' ? 'cancelled by client' : 'client error');
    }
  }
}

function rssMb(): Record<string, number> {
  const out: Record<string, number> = { gateway: Math.round(process.memoryUsage().rss / (1 << 20)) };
  for (const w of cluster.workers) {
    const pid = cluster.supervisor.pid(w.name);
    if (pid === undefined) continue;
    const kb = Number(execFileSync('ps', ['-o', 'rss=', '-p', String(pid)], { encoding: 'utf8' }).trim() || 0);
    out[w.name] = Math.round(kb / 1024);
  }
  return out;
}

const started = Date.now();
const sampler = setInterval(() => {
  console.log(`${((Date.now() - started) / 1000).toFixed(0)} s: RSS MB ${JSON.stringify(rssMb())}`);
}, 30_000);
let victim = 0;
const killer = setInterval(() => {
  const w = cluster.workers[victim++ % cluster.workers.length]!;
  console.log(`${((Date.now() - started) / 1000).toFixed(0)} s: kill -9 ${w.name}`);
  cluster.supervisor.kill(w.name, 'SIGKILL');
}, killEveryMs);
console.log(`soak: ${minutes} min, ${clients} clients, a worker killed every ${killEveryMs / 1000} s`);
console.log(`0 s: RSS MB ${JSON.stringify(rssMb())}`);
await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
clearInterval(killer);
clearInterval(sampler);

let whole = true;
await assertClusterPoolsWhole(cluster, 60_000).catch((error: Error) => {
  whole = false;
  console.error(error.message);
});
const stats = await cluster.dispatcher.poolStats();
console.log(`end: RSS MB ${JSON.stringify(rssMb())}`);
console.log(`requests by outcome: ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`);
console.log(`pages free at the end: ${JSON.stringify(stats.map((s) => `${s?.pagesFree}/${s?.pagesTotal}`))}`);
console.log(`wrong answers: ${wrong}; pools whole: ${whole}`);
await cluster.close();
process.exit(wrong === 0 && whole ? 0 : 1);
