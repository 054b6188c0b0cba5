/**
 * `npm run bench:serve`: `kvfence serve` against llama.cpp's `llama-server` on the same GGUF file (SmolLM2-135M's
 * shape, f16, printable vocabulary: serve-model.ts says why) with the same thread count, each in its own process, both
 * started and taking turns round by round (only one works at a time). At each concurrency, that many clients each stream `--requests` completions back to back over
 * /v1/completions (distinct 128-token prompts, greedy, `ignore_eos`, a fixed output length); a round's output
 * tokens/s is every token streamed over the round's wall time. Prints the median over `--rounds` rounds, TTFT p50/p99
 * over every stream of all rounds, side by side, then (unless --no-neighbour) a probe client's latency alone and beside
 * a busy client (serve-neighbour.ts). Every stream is checked to have generated every token asked for. Writes
 * everything to .cache/bench/serve.json. Without a llama-server build ($KVFENCE_LLAMA_SERVER, default
 * /work/llama/build/bin/llama-server) it says so and prints kvfence's figures alone.
 *
 *   npm run bench:serve -- [--concurrency 1,4,16] [--rounds 3] [--requests 2] [--prompt 128] [--max-tokens 64]
 *                          [--probes 6] [--no-llama] [--no-neighbour] [--no-engine-thread]
 *
 * `--no-engine-thread` runs kvfence's steps on its HTTP thread, to compare with its engine thread (the default).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { median, quantile } from '../src/util/median.js';
import { SeededRandom } from '../src/util/random.js';
import { BENCH_KEYS, type CompletionBody, type StreamTiming, streamCompletion } from './serve-client.js';
import { ensureServeModel } from './serve-model.js';
import { LONG_PROMPT_CHARS, NEIGHBOUR_MODES, type NeighbourResult, probeBeside } from './serve-neighbour.js';
import {
  LLAMA_SERVER_PATH,
  llamaServerAvailable,
  type RunningServer,
  startKvfence,
  startLlamaServer,
} from './serve-servers.js';

const CACHE = join('.cache', 'bench');
const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,4,16' },
    rounds: { type: 'string', default: '3' },
    requests: { type: 'string', default: '2' },
    prompt: { type: 'string', default: '128' },
    'max-tokens': { type: 'string', default: '64' },
    probes: { type: 'string', default: '6' },
    'no-llama': { type: 'boolean', default: false },
    'no-neighbour': { type: 'boolean', default: false },
    'no-engine-thread': { type: 'boolean', default: false },
  },
});

function positive(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} needs a positive integer, got ${text}`);
  return n;
}

const levels = values.concurrency!.split(',').map((s) => positive('concurrency', s));
const rounds = positive('rounds', values.rounds!);
const requestsPerClient = positive('requests', values.requests!);
const promptTokens = positive('prompt', values.prompt!);
const maxTokens = positive('max-tokens', values['max-tokens']!);
const probeCount = positive('probes', values.probes!);
if (probeCount > 1000) throw new Error('--probes must be at most 1000'); // each mode's probes get 1000 indices
const threads = availableParallelism(); // kvfence serve's native backend uses every core; llama-server gets as many
// Every sequence fits: a bench prompt and its output, or a long neighbour prompt (about one token per 2.5 characters).
const maxContext = 2048;
if (promptTokens + maxTokens > maxContext) throw new Error(`--prompt + --max-tokens must be at most ${maxContext}`);

const model = ensureServeModel(CACHE);
const logitBias = Object.fromEntries(model.bannedTokenIds.map((id) => [String(id), -100]));

/** The request of index `i`: the same bytes for both servers; no two requests share a prompt (no cache hits). */
function body(serverModel: string, i: number): CompletionBody {
  const random = new SeededRandom(1_000_003 * (i + 1));
  const span = model.lastTextId - model.firstTextId + 1;
  const prompt = Array.from({ length: promptTokens }, () => model.firstTextId + random.nextInt(span));
  return { model: serverModel, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, logit_bias: logitBias };
}

interface LevelResult {
  concurrency: number;
  /** output tokens/s of each round */
  roundTokensPerSecond: number[];
  tokensPerSecond: number;
  ttftMs: number[];
  ttftP50Ms: number;
  ttftP99Ms: number;
  itlP50Ms: number;
}

interface ServerResult {
  server: RunningServer['name'];
  levels: LevelResult[];
  neighbour: NeighbourResult[];
}

interface RoundResult {
  tokensPerSecond: number;
  timings: StreamTiming[];
}

/** One round at one concurrency: `clients` clients, each sending its requests one after another. */
async function measureRound(server: RunningServer, clients: number, base: number): Promise<RoundResult> {
  const started = performance.now();
  const timings = await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      const mine = [];
      for (let r = 0; r < requestsPerClient; r++) {
        const index = base + c * requestsPerClient + r;
        mine.push(await streamCompletion(server.baseUrl, body(server.model, index), BENCH_KEYS.clients));
      }
      return mine;
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const all = timings.flat();
  return { tokensPerSecond: all.reduce((sum, t) => sum + t.tokens, 0) / seconds, timings: all };
}

function levelResult(clients: number, done: readonly RoundResult[]): LevelResult {
  const roundTokensPerSecond = done.map((r) => r.tokensPerSecond);
  const ttftMs = done.flatMap((r) => r.timings.map((t) => t.ttftMs));
  const itlMs = done.flatMap((r) => r.timings.flatMap((t) => t.itlMs));
  return {
    concurrency: clients,
    roundTokensPerSecond,
    tokensPerSecond: median(roundTokensPerSecond),
    ttftMs,
    ttftP50Ms: quantile(ttftMs, 0.5),
    ttftP99Ms: quantile(ttftMs, 0.99),
    itlP50Ms: quantile(itlMs, 0.5),
  };
}

/** Warm-up, not measured: one stream alone, then the largest concurrency once (indices no measured request uses). */
async function warmUp(server: RunningServer): Promise<void> {
  process.stderr.write(`bench:serve: ${server.name} at ${server.baseUrl}\n`);
  const warmBase = 10_000_000;
  await streamCompletion(server.baseUrl, body(server.model, warmBase), BENCH_KEYS.clients);
  await Promise.all(
    Array.from({ length: Math.max(...levels) }, (_, c) =>
      streamCompletion(server.baseUrl, body(server.model, warmBase + 1 + c), BENCH_KEYS.clients),
    ),
  );
}

/** Idle time before each round: llama.cpp's threads keep polling for work a while after a batch. */
const ROUND_GAP_MS = 1000;

/**
 * Every level's rounds, the servers taking turns round by round (the first one alternating), so drift in the speed of
 * a shared machine falls on both sides alike; an idle server uses no CPU. Both get the same requests.
 */
async function measureLevels(servers: readonly RunningServer[]): Promise<LevelResult[][]> {
  const results: LevelResult[][] = servers.map(() => []);
  let index = 0;
  for (const clients of levels) {
    process.stderr.write(`bench:serve: ${clients} concurrent clients\n`);
    const perServer: RoundResult[][] = servers.map(() => []);
    for (let round = 0; round < rounds; round++) {
      const order = servers.map((_, i) => i);
      if (round % 2 === 1) order.reverse();
      for (const i of order) {
        await new Promise((r) => setTimeout(r, ROUND_GAP_MS)); // the other server's threads stop polling first
        perServer[i]!.push(await measureRound(servers[i]!, clients, index));
      }
      index += clients * requestsPerClient;
    }
    for (const [i, done] of perServer.entries()) results[i]!.push(levelResult(clients, done));
  }
  return results;
}

/** The probe client beside each busy neighbour, one server at a time. */
async function measureNeighbours(server: RunningServer): Promise<NeighbourResult[]> {
  const neighbour: NeighbourResult[] = [];
  if (values['no-neighbour'] === true) return neighbour;
  const longBody = (prompt: string): CompletionBody => ({ ...body(server.model, 0), prompt });
  for (const [m, mode] of NEIGHBOUR_MODES.entries()) {
    // new prompts for each mode: a server that kept the last mode's KV (llama-server's slots do) must not reuse it
    const probes = Array.from({ length: probeCount }, (_, i) => body(server.model, 20_000_000 + m * 1000 + i));
    process.stderr.write(`bench:serve: ${server.name}: probe client, ${mode}\n`);
    neighbour.push(await probeBeside(mode, server.baseUrl, probes, longBody));
  }
  return neighbour;
}

const scratch = mkdtempSync(join(tmpdir(), 'kvfence-bench-serve-'));
process.once('exit', () => rmSync(scratch, { recursive: true, force: true }));
const withLlama = values['no-llama'] !== true && llamaServerAvailable();
if (values['no-llama'] !== true && !withLlama) {
  process.stderr.write(
    `bench:serve: SKIPPING llama-server: no build at ${LLAMA_SERVER_PATH} (set KVFENCE_LLAMA_SERVER to a llama-server ` +
      'binary); kvfence figures only\n',
  );
}
const running: RunningServer[] = [];
let kvfence: ServerResult;
let llama: ServerResult | undefined;
try {
  running.push(await startKvfence(model.path, scratch, maxContext, !values['no-engine-thread']));
  // llama-server: a slot per client of the largest concurrency, each holding the longest sequence a request makes
  if (withLlama) running.push(await startLlamaServer(model.path, threads, Math.max(...levels), maxContext));
  for (const server of running) await warmUp(server);
  const levelResults = await measureLevels(running);
  const results: ServerResult[] = [];
  for (const [i, server] of running.entries()) {
    results.push({ server: server.name, levels: levelResults[i]!, neighbour: await measureNeighbours(server) });
  }
  kvfence = results[0]!;
  llama = results[1];
} finally {
  for (const server of running) await server.stop();
}

const ms = (x: number) => x.toFixed(0).padStart(6);
const lines = [
  `bench:serve: ${model.path}, ${threads} threads each, prompts ${promptTokens} tokens, ${maxTokens} output tokens, ` +
    `${requestsPerClient} requests per client per round, median of ${rounds} rounds`,
  'clients | kvfence tok/s | llama-server tok/s | ratio | TTFT p50 ms kvf / llama | TTFT p99 ms kvf / llama',
];
for (const [i, k] of kvfence.levels.entries()) {
  const l = llama?.levels[i];
  const ratio = l === undefined ? '     -' : (k.tokensPerSecond / l.tokensPerSecond).toFixed(2).padStart(6);
  lines.push(
    `${String(k.concurrency).padStart(7)} | ${k.tokensPerSecond.toFixed(1).padStart(13)} | ` +
      `${(l?.tokensPerSecond.toFixed(1) ?? '-').padStart(18)} | ${ratio} | ` +
      `${ms(k.ttftP50Ms)} / ${l === undefined ? '     -' : ms(l.ttftP50Ms)}          | ` +
      `${ms(k.ttftP99Ms)} / ${l === undefined ? '     -' : ms(l.ttftP99Ms)}`,
  );
}
if (kvfence.neighbour.length > 0) {
  lines.push(
    '',
    `probe client (${probeCount} streams one after another) alone and beside a busy client ` +
      `(slow-uploads: 8 × 1 MiB bodies trickled; long-prompts: ${LONG_PROMPT_CHARS}-character prompts back to back):`,
    'server       | busy client  | TTFT p50 ms | ITL p50 ms | ITL p99 ms',
  );
  for (const result of [kvfence, llama]) {
    for (const n of result?.neighbour ?? []) {
      const head = `${result!.server.padEnd(12)} | ${n.mode.padEnd(12)} | `;
      lines.push(
        n.failure !== undefined
          ? `${head}FAILED after ${n.ttftMs.length} of ${probeCount} probes: ${n.failure}`
          : `${head}${ms(quantile(n.ttftMs, 0.5)).padStart(11)} | ` +
              `${quantile(n.itlMs, 0.5).toFixed(1).padStart(10)} | ${quantile(n.itlMs, 0.99).toFixed(1).padStart(10)}`,
      );
    }
  }
}
process.stdout.write(`${lines.join('\n')}\n`);
mkdirSync(CACHE, { recursive: true });
const report = {
  date: new Date().toISOString(),
  command: `npm run bench:serve -- ${process.argv.slice(2).join(' ')}`.trim(),
  machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: availableParallelism(), loadAverageAtEnd: loadavg() },
  model: model.path,
  threads,
  promptTokens,
  maxTokens,
  requestsPerClient,
  rounds,
  llamaServer: withLlama ? LLAMA_SERVER_PATH : null,
  kvfence,
  llama: llama ?? null,
};
writeFileSync(join(CACHE, 'serve.json'), `${JSON.stringify(report, null, 2)}\n`);
process.stdout.write(`bench:serve: wrote ${join(CACHE, 'serve.json')}\n`);
// llama-server failing a probe is its result; kvfence failing one is a bug, and the bench says so with its exit code
const kvfenceFailure = kvfence.neighbour.find((n) => n.failure !== undefined);
if (kvfenceFailure !== undefined) {
  process.stderr.write(
    `bench:serve: kvfence failed its probe beside ${kvfenceFailure.mode}: ${kvfenceFailure.failure}\n`,
  );
  process.exitCode = 1;
}
