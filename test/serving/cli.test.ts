// `kvfence serve` and `kvfence keys` as an operator runs them: the capacity proof at startup, clamping, key files,
// the request log.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CLI_PATH, runCli } from '../helpers/cli.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { SERVING_MODEL, waitFor } from './serve-helpers.js';

const dir = tempDirectory('kvfence-cli-serve-');
const model = testModelFile(SERVING_MODEL);
const children: ReturnType<typeof spawn>[] = [];
after(() => {
  for (const child of children) child.kill('SIGKILL');
});

/** Starts `kvfence serve`, resolves with its URL and everything it printed once it listens. */
function serve(
  args: readonly string[],
  logLevel: 'silent' | 'info' = 'silent',
): Promise<{
  url: string;
  output: string;
  /** everything printed so far */
  printed: () => string;
  child: ReturnType<typeof spawn>;
  stop: () => Promise<number | null>;
}> {
  const child = spawn(process.execPath, [CLI_PATH, 'serve', '--port', '0', '--log-level', logLevel, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start within 30 s:\n${output}`)), 30_000);
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /on (http:\/\/\S+)\n/.exec(output);
      if (match === null) return;
      clearTimeout(timer);
      const stop = () =>
        new Promise<number | null>((done) => {
          child.once('exit', (code) => done(code));
          child.kill('SIGTERM');
        });
      resolve({ url: match[1]!, output, printed: () => output, child, stop });
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code}:\n${output}`));
    });
  });
}

test('serve refuses to start when the context does not fit the pool, printing both numbers', () => {
  const r = runCli([
    'serve',
    '--model',
    model,
    '--kv-pages',
    '4',
    '--port',
    '0',
    '--incidents-db',
    join(dir, 'a.sqlite'),
  ]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /256 tokens needs 16 KV pages of 16 tokens, but the KV pool of 4 pages holds only 64 tokens/);
});

test('keys add + serve --api-keys --clamp-context: the key works, others get 401, /v1/models shows the clamped context', async () => {
  const keyFile = join(dir, 'keys.json');
  const added = runCli(['keys', 'add', '--tenant', 'acme', '--file', keyFile]);
  assert.equal(added.status, 0, added.stderr);
  const key = added.stdout.trim();
  assert.ok(!readFileSync(keyFile, 'utf8').includes(key), 'the file holds no plaintext key');
  const hashed = runCli(['keys', 'hash', '--tenant', 'acme', '--key', key]);
  assert.deepEqual(JSON.parse(readFileSync(keyFile, 'utf8')).keys, [JSON.parse(hashed.stdout)]);

  const server = await serve([
    '--model',
    model,
    '--served-model-name',
    'tiny',
    '--kv-pages',
    '4',
    '--clamp-context',
    '--api-keys',
    keyFile,
    '--incidents-db',
    join(dir, 'b.sqlite'),
  ]);
  assert.match(server.output, /CLAMPED from 256 to 64 tokens/);
  const get = (auth: string) =>
    fetch(`${server.url}/v1/models`, { headers: { authorization: auth }, signal: AbortSignal.timeout(10_000) });
  const models = (await (await get(`Bearer ${key}`)).json()) as { data: { id: string; max_model_len: number }[] };
  assert.deepEqual(
    models.data.map((m) => [m.id, m.max_model_len]),
    [['tiny', 64]],
  );
  assert.equal((await get('Bearer wrong-key-0123456789')).status, 401);
  assert.equal(await server.stop(), 0);
});

test('SIGHUP re-reads the key file: a new key works without a restart; a bad file is refused and the old table stays', async () => {
  const keyFile = join(dir, 'reload-keys.json');
  const acme = runCli(['keys', 'add', '--tenant', 'acme', '--file', keyFile]).stdout.trim();
  const server = await serve([
    '--model',
    model,
    '--kv-pages',
    '32',
    '--api-keys',
    keyFile,
    '--incidents-db',
    join(dir, 'r.sqlite'),
  ]);
  const status = async (key: string) =>
    (
      await fetch(`${server.url}/v1/models`, {
        headers: { authorization: `Bearer ${key}` },
        signal: AbortSignal.timeout(10_000),
      })
    ).status;
  const hangUp = async (expected: RegExp) => {
    server.child.kill('SIGHUP');
    await waitFor(() => expected.test(server.printed()), `serve to print ${expected}`);
  };
  const beta = runCli(['keys', 'add', '--tenant', 'beta', '--file', keyFile]).stdout.trim();
  assert.equal(await status(beta), 401, 'not read yet');
  await hangUp(/2 tenants reloaded from/);
  assert.equal(await status(beta), 200);
  assert.equal(await status(acme), 200);

  writeFileSync(keyFile, '{"keys": [');
  await hangUp(/key file NOT reloaded: .* is not JSON/);
  assert.equal(await status(beta), 200, 'the running table stays');
  assert.equal(await server.stop(), 0);
});

test('a request’s log lines carry its tenant once, as a key with the tenant’s name', async () => {
  const keyFile = join(dir, 'log-keys.json');
  const key = runCli(['keys', 'add', '--tenant', 'acme', '--file', keyFile]).stdout.trim();
  const args = ['--model', model, '--kv-pages', '32', '--api-keys', keyFile, '--incidents-db', join(dir, 'l.sqlite')];
  const server = await serve(args, 'info');
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'kvfence-test-tiny-llama-f32-s7', prompt: 'hi', max_tokens: 4 }),
    signal: AbortSignal.timeout(10_000),
  });
  const body = await r.text();
  assert.equal(r.status, 200, body);
  const { id } = JSON.parse(body) as { id: string };
  await waitFor(() => server.printed().includes('"msg":"request completed"}\n'), 'the request’s last log line');
  // pino writes a key as often as it is given (a child's binding and the line's own field): JSON.parse keeps the last
  const lines = server
    .printed()
    .split('\n')
    .filter((line) => line.includes(`"request":"${id}"`));
  assert.deepEqual(
    lines.map((line) => (JSON.parse(line) as { msg: string }).msg),
    ['request accepted', 'request completed'],
  );
  for (const line of lines) {
    assert.equal(line.split('"tenant":').length - 1, 1, line);
    assert.equal((JSON.parse(line) as { tenant: unknown }).tenant, 'acme');
  }
  assert.equal(await server.stop(), 0);
});

test('serve that cannot start exits with one line: a missing key file, a port in use', async () => {
  const missing = runCli(['serve', '--model', model, '--port', '0', '--api-keys', join(dir, 'no-such-keys.json')]);
  assert.equal(missing.status, 1, missing.stderr);
  assert.match(missing.stderr, /^kvfence: .*no-such-keys\.json/);
  const server = await serve(['--model', model, '--kv-pages', '32', '--incidents-db', join(dir, 'p.sqlite')]);
  const port = new URL(server.url).port;
  const taken = runCli([
    'serve',
    '--model',
    model,
    '--kv-pages',
    '32',
    '--port',
    port,
    '--incidents-db',
    join(dir, 'q.sqlite'),
  ]);
  assert.equal(taken.status, 1, taken.stderr);
  assert.match(taken.stderr, new RegExp(`^kvfence: cannot listen on 127\\.0\\.0\\.1:${port} \\(EADDRINUSE\\)`));
  assert.equal(await server.stop(), 0);
});

test('serve without keys announces the single-tenant dev mode; --no-engine-thread answers the same', async () => {
  const texts: string[] = [];
  for (const extra of [[], ['--no-engine-thread']]) {
    const db = join(dir, `c${texts.length}.sqlite`);
    const server = await serve(['--model', model, '--kv-pages', '32', '--incidents-db', db, ...extra]);
    assert.match(server.output, /DEV MODE/);
    const r = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'kvfence-test-tiny-llama-f32-s7', prompt: 'hi', max_tokens: 8, temperature: 0 }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(r.status, 200);
    texts.push(((await r.json()) as { choices: { text: string }[] }).choices[0]!.text);
    assert.equal(await server.stop(), 0);
  }
  assert.ok(texts[0]!.length > 0);
  assert.equal(texts[1], texts[0]);
});
