// Multi-host, end to end: gateway, prefill and decode each in its own network namespace, joined by veth pairs to a
// bridge in a fourth namespace (192.168.213.0/24 exists only inside these namespaces; nothing leaves them). The
// workers run `kvfence prefill|decode` by hand as an operator would, with the secret in a file; the gateway reaches
// them over the veths; a client inside the gateway's namespace gets the same bit-identical answer as a colocated run.
// Needs root and iproute2 (`ip`); skipped with a message otherwise (.ci/run installs iproute2; CI runs as root).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type RunningServer, startServer } from '../../src/launch/colocated-server.js';
import { CLI_PATH } from '../helpers/cli.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post, SERVING_MODEL, testServeConfig } from '../serving/serve-helpers.js';

const hasIp = spawnSync('ip', ['-V'], { encoding: 'utf8' }).status === 0;
const isRoot = process.getuid?.() === 0;
const skip = !isRoot ? 'needs root (network namespaces)' : !hasIp ? 'needs iproute2 (the `ip` command)' : false;

const tag = `kvf${process.pid % 100_000}`;
const NS = { bridge: `${tag}br`, gateway: `${tag}gw`, prefill: `${tag}pf`, decode: `${tag}dc` } as const;
const ADDRESS = { gateway: '192.168.213.1', prefill: '192.168.213.2', decode: '192.168.213.3' } as const;

function ip(...args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

function inNs(ns: string, ...args: string[]): void {
  ip('netns', 'exec', ns, ...args);
}

function setUpNetwork(): void {
  for (const ns of Object.values(NS)) ip('netns', 'add', ns);
  inNs(NS.bridge, 'ip', 'link', 'add', 'br0', 'type', 'bridge');
  inNs(NS.bridge, 'ip', 'link', 'set', 'br0', 'up');
  for (const host of ['gateway', 'prefill', 'decode'] as const) {
    const port = `p-${host}`;
    ip('link', 'add', 'name', 'eth0', 'netns', NS[host], 'type', 'veth', 'peer', 'name', port, 'netns', NS.bridge);
    inNs(NS.bridge, 'ip', 'link', 'set', port, 'master', 'br0');
    inNs(NS.bridge, 'ip', 'link', 'set', port, 'up');
    inNs(NS[host], 'ip', 'addr', 'add', `${ADDRESS[host]}/24`, 'dev', 'eth0');
    inNs(NS[host], 'ip', 'link', 'set', 'eth0', 'up');
    inNs(NS[host], 'ip', 'link', 'set', 'lo', 'up');
  }
}

function tearDownNetwork(): void {
  for (const ns of Object.values(NS)) spawnSync('ip', ['netns', 'del', ns], { timeout: 10_000 });
}

describe('gateway, prefill and decode on three hosts (network namespaces)', { skip }, () => {
  const dir = tempDirectory('kvfence-multihost-');
  const model = testModelFile(SERVING_MODEL);
  const children: ChildProcess[] = [];
  let colocated: RunningServer;

  function run(host: keyof typeof ADDRESS, args: readonly string[]): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', NS[host], process.execPath, CLI_PATH, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    return child;
  }

  before(async () => {
    tearDownNetwork(); // leftovers of a killed run
    setUpNetwork();
    const secretFile = join(dir, 'cluster-secret');
    writeFileSync(secretFile, 'multihost-test-secret-0123456789abcdef\n', { mode: 0o600 });
    const common = [
      '--model',
      model,
      '--served-model-name',
      MODEL_ID,
      '--cluster-secret-file',
      secretFile,
      '--log-level',
      'warn',
    ];
    const worker = [
      '--backend',
      'reference',
      '--kv-pages',
      '128',
      '--prefill-chunk',
      '64',
      '--step-tokens',
      '256',
      '--max-running',
      '16',
    ];
    run('decode', [
      'decode',
      ...common,
      ...worker,
      '--incidents-db',
      join(dir, 'd.sqlite'),
      '--control-listen',
      `${ADDRESS.decode}:7201`,
      '--transfer-listen',
      `${ADDRESS.decode}:7202`,
    ]);
    run('prefill', [
      'prefill',
      ...common,
      ...worker,
      '--incidents-db',
      join(dir, 'p.sqlite'),
      '--control-listen',
      `${ADDRESS.prefill}:7101`,
    ]);
    const gateway = run('gateway', [
      'gateway',
      ...common,
      '--prefill',
      `${ADDRESS.prefill}:7101`,
      '--decode',
      `${ADDRESS.decode}:7201`,
      '--host',
      '127.0.0.1',
      '--port',
      '8000',
    ]);
    let output = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the gateway did not start within 60 s:\n${output}`)), 60_000);
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        if (/serving model .* on http:\/\/127\.0\.0\.1:8000/.test(output)) {
          clearTimeout(timer);
          resolve();
        }
      };
      gateway.stdout!.on('data', read);
      gateway.stderr!.on('data', read);
      gateway.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the gateway exited (${code}):\n${output}`));
      });
    });
    colocated = await startServer(testServeConfig());
  });

  after(async () => {
    for (const child of children) child.kill('SIGKILL');
    await colocated?.close();
    tearDownNetwork();
  });

  /** A completion from a client inside the gateway's namespace (its loopback). */
  function completeInGatewayHost(body: object): { status: number; json: unknown } {
    const script = `const r = await fetch('http://127.0.0.1:8000/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: process.argv[1] });
      process.stdout.write(JSON.stringify({ status: r.status, json: await r.json() }));`;
    const r = spawnSync(
      'ip',
      ['netns', 'exec', NS.gateway, process.execPath, '--input-type=module', '-e', script, JSON.stringify(body)],
      {
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as { status: number; json: unknown };
  }

  test('greedy answers across hosts are bit-identical to a colocated run', async () => {
    for (const [length, maxTokens] of [
      [30, 20],
      [130, 40],
    ] as const) {
      const body = {
        model: MODEL_ID,
        prompt: tokens(length, length),
        max_tokens: maxTokens,
        temperature: 0,
        logprobs: 2,
      };
      const remote = completeInGatewayHost(body);
      const local = await post(colocated, '/v1/completions', body);
      assert.equal(remote.status, 200, JSON.stringify(remote.json));
      const pick = (j: unknown) =>
        (j as { choices: { text: string; logprobs: unknown; finish_reason: string }[] }).choices[0];
      assert.deepEqual(pick(remote.json), pick(local.json));
    }
  });

  test('an oversized prompt gets the same 400 across hosts', () => {
    const r = completeInGatewayHost({ model: MODEL_ID, prompt: tokens(300, 1), max_tokens: 5 });
    assert.equal(r.status, 400);
    assert.equal((r.json as { error: { code: string } }).error.code, 'context_length_exceeded');
  });
});
