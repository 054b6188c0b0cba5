/**
 * The two servers `bench:serve` compares, each started as its own child process on the same model file. Both run for
 * the whole bench, but only one is sent work at a time, so they never compete for the machine's cores.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hashApiKey } from '../src/gateway/tenants.js';
import { BENCH_KEYS } from './serve-client.js';

export interface RunningServer {
  name: 'kvfence' | 'llama-server';
  baseUrl: string;
  /** the model id requests name */
  model: string;
  stop: () => Promise<void>;
}

const START_TIMEOUT_MS = 180_000;
const STOP_TIMEOUT_MS = 30_000;
/** the llama-server binary: $KVFENCE_LLAMA_SERVER, else a llama.cpp build beside this checkout */
export const LLAMA_SERVER_PATH = process.env.KVFENCE_LLAMA_SERVER ?? '/work/llama/build/bin/llama-server';

export function llamaServerAvailable(): boolean {
  return existsSync(LLAMA_SERVER_PATH);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject()));
    });
  });
}

function stopper(child: ChildProcess): () => Promise<void> {
  return () =>
    new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      const kill = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      child.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      child.kill('SIGTERM');
    });
}

/** Polls GET /health until 200 (llama-server answers 503 while it loads), the child exits, or the deadline. */
async function waitHealthy(baseUrl: string, child: ChildProcess, name: string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${name} exited (${child.exitCode}) before it was ready`);
    try {
      const response = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  child.kill('SIGKILL');
  throw new Error(`${name} was not healthy within ${START_TIMEOUT_MS} ms`);
}

/** The bench's three tenants (BENCH_KEYS) as a `--api-keys` file. */
function writeKeyFile(scratch: string): string {
  const path = join(scratch, 'api-keys.json');
  const keys = Object.entries(BENCH_KEYS).map(([tenant, key]) => ({ tenant, sha256: hashApiKey(key) }));
  writeFileSync(path, JSON.stringify({ keys }));
  return path;
}

/**
 * `kvfence serve` on the native backend (it insists: no silent fall back to the slow reference backend); its engine
 * on its own thread unless `engineThread` is false (`--no-engine-thread`: steps share the HTTP thread).
 */
export async function startKvfence(
  modelPath: string,
  scratch: string,
  maxContext: number,
  engineThread: boolean,
): Promise<RunningServer> {
  const port = await freePort();
  const main = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
  const args = [main, 'serve', '--model', modelPath, '--backend', 'native', '--port', String(port)];
  args.push('--max-context', String(maxContext), '--log-level', 'warn');
  args.push('--incidents-db', join(scratch, 'incidents.sqlite'), '--api-keys', writeKeyFile(scratch));
  if (!engineThread) args.push('--no-engine-thread');
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  const baseUrl = `http://127.0.0.1:${port}`;
  const stop = stopper(child);
  try {
    await waitHealthy(baseUrl, child, 'kvfence serve');
    const models = await fetch(`${baseUrl}/v1/models`, {
      headers: { authorization: `Bearer ${BENCH_KEYS.clients}` },
      signal: AbortSignal.timeout(10_000),
    });
    if (!models.ok) throw new Error(`kvfence serve: GET /v1/models answered ${models.status}`);
    const list = (await models.json()) as { data: { id: string }[] };
    return { name: 'kvfence', baseUrl, model: list.data[0]!.id, stop };
  } catch (error) {
    await stop(); // never leave the server running behind a failed start
    throw error;
  }
}

/**
 * llama-server at its best for this load: `slots` parallel slots of `slotContext` tokens each, continuous batching
 * (its default), no web UI, no logs, and no host-memory prompt cache (`--cache-ram 0`: no request here repeats a
 * prompt, and saving idle slots to it costs a copy per new request).
 */
export async function startLlamaServer(
  modelPath: string,
  threads: number,
  slots: number,
  slotContext: number,
): Promise<RunningServer> {
  const port = await freePort();
  const args = ['-m', modelPath, '-t', String(threads), '-np', String(slots), '-c', String(slots * slotContext)];
  args.push('--no-webui', '--cache-ram', '0', '--log-disable', '--host', '127.0.0.1', '--port', String(port));
  const child = spawn(LLAMA_SERVER_PATH, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  const baseUrl = `http://127.0.0.1:${port}`;
  await waitHealthy(baseUrl, child, 'llama-server');
  return { name: 'llama-server', baseUrl, model: 'bench', stop: stopper(child) };
}
