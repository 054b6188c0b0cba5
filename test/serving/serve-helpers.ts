/** A colocated server on the tiny test model, in-process, on a free port: for the serving end-to-end tests. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { ENGINE_PARTS, type EngineParts } from '../../src/engine/engine-parts.js';
import { hashApiKey } from '../../src/gateway/tenants.js';
import { type RunningServer, startServer } from '../../src/launch/colocated-server.js';
import type { GatewayParts } from '../../src/launch/open-gateway.js';
import { SERVE_DEFAULTS, type ServeConfig } from '../../src/launch/serve-config.js';
import type { TestModelOptions } from '../../src/model/test-model.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';

/** Sharp logits so greedy output is stable; a short context keeps prompts (and the suite) small. */
export const SERVING_MODEL: TestModelOptions = {
  preset: 'tiny',
  arch: 'llama',
  dtype: 'f32',
  seed: 7,
  logitScale: 8,
  contextLength: 256,
};
export const MODEL_ID = 'tiny-test';

const dir = tempDirectory('kvfence-serving-');
let files = 0;

export function keyFor(tenant: string): string {
  return `test-key-for-${tenant}-0123456789`;
}

/** A key file for tenants; `limits` become the file's per-tenant limits. */
export function writeKeyFile(
  tenants: readonly string[],
  limits: Record<string, { concurrentRequestsMax?: number; kvPagesMax?: number }> = {},
): string {
  const path = join(dir, `keys-${files++}.json`);
  writeFileSync(
    path,
    JSON.stringify({
      keys: tenants.map((tenant) => ({ tenant, sha256: hashApiKey(keyFor(tenant)) })),
      tenants: limits,
    }),
  );
  return path;
}

const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';

/** A file holding the operators' admin token (`adminTokenFile`): /metrics then shows per-tenant series to it. */
export function writeAdminTokenFile(): string {
  const path = join(dir, `admin-token-${files++}`);
  writeFileSync(path, `${ADMIN_TOKEN}\n`);
  return path;
}

/** /metrics as the operator reads it, with the admin token. */
export async function adminMetrics(server: Served): Promise<string> {
  const response = await fetch(`${server.url}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    signal: AbortSignal.timeout(10_000),
  });
  return response.text();
}

/** The test server's settings: the tiny model on the reference backend, a 256-token context, 128 pages of 16. */
export function testServeConfig(overrides: Partial<ServeConfig> = {}): ServeConfig {
  return {
    modelPath: testModelFile(SERVING_MODEL),
    modelName: MODEL_ID,
    host: '127.0.0.1',
    port: 0,
    backend: 'reference', // the oracle: these tests are about serving, not kernels
    kvPages: 128,
    pageSize: 16,
    clampContext: false,
    runningMax: 16,
    waitingMax: 64,
    queueTimeoutMs: 20_000,
    prefillChunk: 64,
    stepTokens: 256,
    promptStepMs: SERVE_DEFAULTS.promptStepMs,
    tenantConcurrentMax: SERVE_DEFAULTS.tenantConcurrentMax,
    incidentsDb: join(dir, `incidents-${files++}.sqlite`),
    requestTimeoutMs: 60_000,
    logLevel: 'silent',
    ...overrides,
  };
}

/** `parts`: what the engine and gateway are built from (a test hands in its own CompletionRun here). */
export async function startTestServer(
  overrides: Partial<ServeConfig> = {},
  parts: EngineParts & GatewayParts = ENGINE_PARTS,
): Promise<RunningServer> {
  return startServer(testServeConfig(overrides), () => {}, parts);
}

/** Anything serving the API at `url`: a colocated server, a disaggregated cluster. */
export interface Served {
  url: string;
}

export function clientFor(server: Served, tenant = 'dev'): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: keyFor(tenant), maxRetries: 0, timeout: 60_000 });
}

/** Raw HTTP, for status codes and headers the client hides. */
export async function post(
  server: Served,
  path: string,
  body: unknown,
  tenant = 'dev',
): Promise<{ status: number; json: unknown; headers: Headers }> {
  const response = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor(tenant)}` },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await response.text();
  return { status: response.status, json: text === '' ? undefined : JSON.parse(text), headers: response.headers };
}

/** Polls until `condition` holds or the timeout passes (then throws). */
export async function waitFor(condition: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** The pool is whole again: nothing reserved, nothing active. */
export function assertPoolWhole(server: RunningServer): void {
  const c = server.worker.pool.checkConservation();
  if (c.free !== server.worker.pool.pageCount) throw new Error(`pool not whole: ${JSON.stringify(c)}`);
}

/** Polls an async condition until it holds or the timeout passes (then throws). */
export async function waitForAsync(condition: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
