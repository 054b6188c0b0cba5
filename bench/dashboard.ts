/**
 * What an open dashboard costs decode: the same decode load on a colocated server (embedded model, default 1 GiB pool,
 * so the page map has thousands of pages to draw) with no dashboard, and with one SSE client connected to
 * /dashboard/events reading every update. Runs alternate (without, with, without, …) so drift hits both alike; prints
 * the median generated tokens/s of each and their ratio (with / without: 1.00 = no cost), and what building one update
 * costs the event loop by itself (a figure that other load on the machine does not blur).
 *
 *   npm run bench:dashboard -- [--requests 4] [--max-tokens 256] [--runs 5] [--backend native|reference]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendPreference } from '../src/compute/select-backend.js';
import { startServer } from '../src/launch/colocated-server.js';
import { SERVE_DEFAULTS } from '../src/launch/serve-config.js';
import { median } from '../src/util/median.js';
import { numberFlag } from './bench-types.js';

const arg = (name: string, fallback: number) => numberFlag(process.argv, name, fallback);
const requests = arg('requests', 4);
const maxTokens = arg('max-tokens', 256);
const runs = arg('runs', 5);
const backendAt = process.argv.indexOf('--backend');
const backend: BackendPreference =
  backendAt >= 0 && process.argv[backendAt + 1] === 'reference' ? 'reference' : 'native';

const dir = mkdtempSync(join(tmpdir(), 'kvfence-bench-dashboard-'));
process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
const tokenFile = join(dir, 'admin-token');
const token = 'bench-admin-token-0123456789abcdef';
writeFileSync(tokenFile, `${token}\n`);
const server = await startServer(
  {
    ...SERVE_DEFAULTS,
    port: 0,
    backend,
    clampContext: false,
    incidentsDb: join(dir, 'incidents.sqlite'),
    adminTokenFile: tokenFile,
    logLevel: 'silent',
  },
  () => {},
);
const model = (
  (await (await fetch(`${server.url}/v1/models`)).json()) as {
    data: { id: string }[];
  }
).data[0]!.id;

/** One round of decode: `requests` greedy completions at once; returns generated tokens per second. */
async function decodeRound(): Promise<number> {
  const started = performance.now();
  const answers = await Promise.all(
    Array.from({ length: requests }, async (_, i) => {
      const response = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model,
          prompt: `request ${i} of the dashboard bench`,
          max_tokens: maxTokens,
          temperature: 0,
          ignore_eos: true,
        }),
      });
      const body = (await response.json()) as { usage: { completion_tokens: number } };
      return body.usage.completion_tokens;
    }),
  );
  const tokens = answers.reduce((a, b) => a + b, 0);
  return tokens / ((performance.now() - started) / 1000);
}

/** An SSE client reading every update (what an open dashboard tab does); resolves once the first map arrived. */
function openDashboard(): Promise<{ updates: () => number; close: () => void }> {
  return new Promise((resolve, reject) => {
    let updates = 0;
    const request = httpGet(
      `${server.url}/dashboard/events`,
      { headers: { authorization: `Bearer ${token}` } },
      (res) => {
        if (res.statusCode !== 200) reject(new Error(`dashboard feed: HTTP ${res.statusCode}`));
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const before = updates;
          updates += chunk.split('event: map').length - 1;
          if (before === 0 && updates > 0) resolve({ updates: () => updates, close: () => request.destroy() });
        });
      },
    );
    request.on('error', reject);
  });
}

/** The event-loop time one update takes to build (the page map and its JSON), by itself: a bound free of load noise. */
async function updateCostUs(): Promise<number> {
  const rounds = 200;
  const started = performance.now();
  for (let i = 0; i < rounds; i++) {
    const [w] = await server.worker.pageMaps();
    JSON.stringify({
      cells: Buffer.from(w!.report!.map.cells).toString('base64'),
      owners: Buffer.from(w!.report!.map.owners).toString('base64'),
      tenants: w!.report!.map.tenants,
    });
  }
  return ((performance.now() - started) * 1000) / rounds;
}

await decodeRound(); // warm-up: the model, the kernels, the first connections
const without: number[] = [];
const withDashboard: number[] = [];
let updatesSeen = 0;
const withOne = async () => {
  const dashboard = await openDashboard();
  const before = dashboard.updates();
  withDashboard.push(await decodeRound());
  updatesSeen += dashboard.updates() - before;
  dashboard.close();
};
// ABBA order: a drift of the machine's speed during the runs weighs on both sides alike
for (let run = 0; run < runs; run++) {
  if (run % 2 === 0) {
    without.push(await decodeRound());
    await withOne();
  } else {
    await withOne();
    without.push(await decodeRound());
  }
}
const costUs = await updateCostUs();
await server.close();

const pages = server.worker.pool.pageCount;
const a = median(without);
const b = median(withDashboard);
process.stdout.write(
  `dashboard bench: ${requests} requests × ${maxTokens} tokens, ${runs} runs each, ${backend} backend, pool ${pages} pages\n` +
    `  without a dashboard: ${a.toFixed(1)} tokens/s (median; runs ${without.map((x) => x.toFixed(1)).join(', ')})\n` +
    `  with one connected:  ${b.toFixed(1)} tokens/s (median; runs ${withDashboard.map((x) => x.toFixed(1)).join(', ')}; ${updatesSeen} page-map updates received)\n` +
    `  ratio with / without: ${(b / a).toFixed(3)}\n` +
    `  one update costs ${costUs.toFixed(0)} µs of the event loop: ${((costUs * 4) / 1e4).toFixed(3)} % of one core at 4 updates/s\n`,
);
