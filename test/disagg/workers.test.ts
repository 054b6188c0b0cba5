// Worker processes on their own: the I1 proof of a prefill pool at startup, the incident's exact shape with that proof
// bypassed in a test build, peers without the cluster secret, the workers' own I2 re-checks over the control channel,
// and `kvfence serve --disaggregated` as an operator runs it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CLUSTER_SECRET_ENV } from '../../src/cluster/cluster-secret.js';
import { ControlConnection } from '../../src/cluster/control-channel.js';
import type { ControlMessage } from '../../src/cluster/control-protocol.js';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { systemClock } from '../../src/util/clock.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import { CLI_PATH, runCli } from '../helpers/cli.js';
import { testModelFile } from '../helpers/models.js';
import { tokens } from '../serving/isolation-suite.js';
import { MODEL_ID, post, SERVING_MODEL } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, poolStats, startTestCluster } from './cluster-helpers.js';

const model = testModelFile(SERVING_MODEL);
const SECRET_TEXT = 'a-test-cluster-secret-of-at-least-32-bytes';

describe('worker startup', () => {
  test('a prefill worker whose pool cannot hold the context refuses to start, giving both numbers', () => {
    const r = runCli(
      [
        'prefill',
        '--model',
        model,
        '--backend',
        'reference',
        '--kv-pages',
        '4',
        '--control-listen',
        '127.0.0.1:0',
        '--log-level',
        'silent',
      ],
      { ...process.env, [CLUSTER_SECRET_ENV]: SECRET_TEXT },
    );
    assert.equal(r.status, 1, r.stderr);
    assert.match(
      r.stderr,
      /context of 256 tokens needs 16 KV pages of 16 tokens, but the KV pool of 4 pages holds only 64 tokens/,
    );
  });

  test('a worker without a cluster secret (or with a short one) refuses to start', () => {
    const env = { ...process.env };
    delete env[CLUSTER_SECRET_ENV];
    const none = runCli(['decode', '--model', model, '--kv-pages', '32', '--control-listen', '127.0.0.1:0'], env);
    assert.equal(none.status, 1);
    assert.match(none.stderr, /no cluster secret: pass --cluster-secret-file/);
    const short = runCli(['prefill', '--model', model, '--kv-pages', '32'], { ...env, [CLUSTER_SECRET_ENV]: 'short' });
    assert.equal(short.status, 1);
    assert.match(short.stderr, /is 5 bytes; it must be 32/);
  });

  test('a port in use is one line naming it and exit 1, for the control, transfer and health listeners', async () => {
    // it was "internal error: Error: listen EADDRINUSE", exit 2, the code kept for kvfence's own bugs
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    const env = { ...process.env, [CLUSTER_SECRET_ENV]: 'k'.repeat(32) };
    const base = ['decode', '--model', model, '--kv-pages', '32', '--log-level', 'silent'];
    try {
      for (const flag of ['--control-listen', '--transfer-listen', '--health-listen']) {
        const r = runCli([...base, '--control-listen', '127.0.0.1:0', flag, `127.0.0.1:${port}`], env);
        assert.equal(r.status, 1, `${flag}: ${r.stderr}`);
        assert.match(r.stderr, new RegExp(`^kvfence: cannot listen on 127\\.0\\.0\\.1:${port} \\(EADDRINUSE\\)\n$`));
      }
    } finally {
      taken.close();
    }
  });

  test('a bad --health-listen fails the start before the model loads, and the process exits', () => {
    const env = { ...process.env, [CLUSTER_SECRET_ENV]: 'k'.repeat(32) };
    const r = runCli(['decode', '--model', model, '--kv-pages', '32', '--health-listen', '9101'], env);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /--health-listen: "9101" is not host:port/);
    assert.doesNotMatch(r.stdout, /weights|control on/, 'refused before the model loaded and before it listened');
  });
});

describe('the incident, with the prefill capacity proof bypassed (test build)', () => {
  let cluster: RunningCluster;
  before(async () => {
    // prefill pool: 4 pages × 16 = 64 tokens, yet it advertises the model's 256 (unproven); decode is sized properly
    cluster = await startTestCluster({
      prefillSettings: { pageCount: 4 },
      plan: { unprovenCapacity: true },
    });
  });
  after(async () => {
    await cluster?.close();
  });

  test('a prompt longer than the prefill pool but inside the advertised context gets an error; decode reads nothing', async () => {
    const models = (await (
      await fetch(`${cluster.url}/v1/models`, { headers: { authorization: 'Bearer x' } })
    ).json()) as {
      data: { max_model_len: number }[];
    };
    assert.equal(models.data[0]!.max_model_len, 256, 'the misadvertised context');
    const before = await poolStats(cluster);
    for (const stream of [false, true]) {
      const r = await post(cluster, '/v1/completions', {
        model: MODEL_ID,
        prompt: tokens(100, 1),
        max_tokens: 20,
        stream,
      });
      assert.equal(r.status, 503, JSON.stringify(r.json));
      assert.equal((r.json as { error: { code: string } }).error.code, 'kv_capacity_exceeded');
      assert.match(
        (r.json as { error: { message: string } }).error.message,
        /needs 7 KV pages but the prefill pool has only 4/,
      );
    }
    await assertClusterPoolsWhole(cluster);
    const afterStats = await poolStats(cluster);
    assert.equal(afterStats[0]!.reservations, before[0]!.reservations, 'the prefill reserved nothing');
    // what fits the small pool is still served
    const ok = await post(cluster, '/v1/completions', { model: MODEL_ID, prompt: tokens(60, 2), max_tokens: 5 });
    assert.equal(ok.status, 200);
  });

  test('strangers are refused on every worker port before anything is written', async () => {
    const before = await poolStats(cluster);
    const addresses = cluster.workers.flatMap((w) => [w.control, ...(w.transfer !== undefined ? [w.transfer] : [])]);
    assert.equal(addresses.length, 3);
    const wrong = new TcpTransport({
      secret: new Uint8Array(32).fill(7),
      handshakeTimeoutMs: 3_000,
      clock: systemClock,
    });
    for (const address of addresses) {
      await assert.rejects(wrong.connect(address), /auth_failed|closed/, `a wrong secret at ${address}`);
      const received = await rawGarbage(address);
      assert.equal(received, 0, `${address} wrote nothing to a stranger`);
    }
    await assertClusterPoolsWhole(cluster);
    const afterStats = await poolStats(cluster);
    assert.deepEqual(
      afterStats.map((s) => s.reservations),
      before.map((s) => s.reservations),
      'no page was reserved',
    );
  });

  test('workers re-check I2 themselves: an oversized job or reservation gets context_length_exceeded', async () => {
    const transport = new TcpTransport({ secret: cluster.secret, handshakeTimeoutMs: 3_000, clock: systemClock });
    const request = {
      id: 'direct-1',
      tenant: 'dev',
      promptTokens: tokens(250, 3),
      maxTokens: 10,
      sampling: { temperature: 0, topK: 0, topP: 1, seed: 0 },
      topLogprobs: 0,
      tenantKvPagesMax: 64,
    };
    const decode = cluster.workers.find((w) => w.role === 'decode')!;
    const decodeAnswer = await exchange(transport, decode.control, { type: 'reserve', request });
    assert.deepEqual(
      decodeAnswer.type === 'end' && decodeAnswer.end.kind === 'failed' && decodeAnswer.end.code,
      'context_length_exceeded',
    );
    const prefill = cluster.workers.find((w) => w.role === 'prefill')!;
    const ticket = {
      request: 'direct-1',
      tenant: 'dev',
      nonce: new Uint8Array(16),
      epoch: 1,
      pageCount: 16,
      tokenCount: 250,
      pageSizeTokens: 16,
      pageBytes: 4096, // the tiny model: 2 layers × K and V × 16 tokens × kvDim 32 × 2 bytes (f16)
    };
    const prefillAnswer = await exchange(transport, prefill.control, {
      type: 'prefill',
      request,
      ticket,
      decodeAddress: decode.transfer!,
    });
    assert.deepEqual(
      prefillAnswer.type === 'end' && prefillAnswer.end.kind === 'failed' && prefillAnswer.end.code,
      'context_length_exceeded',
    );
    await assertClusterPoolsWhole(cluster);
  });
});

/** Sends 64 bytes of not-a-handshake; resolves with how many bytes came back before the worker closed. */
function rawGarbage(address: string): Promise<number> {
  const at = address.lastIndexOf(':');
  return new Promise((resolve, reject) => {
    let received = 0;
    const socket = connect({ host: address.slice(0, at), port: Number(address.slice(at + 1)) }, () => {
      socket.write(Buffer.alloc(64, 0x41));
    });
    socket.on('data', (chunk) => {
      received += chunk.byteLength;
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(received));
    setTimeout(() => reject(new Error(`${address} kept a stranger's connection open`)), 10_000).unref();
  });
}

/** One control message to a worker, and its first answer after the hello. */
async function exchange(transport: TcpTransport, address: string, message: ControlMessage): Promise<ControlMessage> {
  const channel = await transport.connect(address);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer from ${address}`)), 10_000);
    const conn = new ControlConnection(
      channel,
      {
        message: (m) => {
          if (m.type === 'hello') {
            conn.send(message);
            return;
          }
          clearTimeout(timer);
          conn.close('done');
          resolve(m);
        },
        close: () => {},
      },
      5_000,
    );
  });
}

describe('kvfence serve --disaggregated', () => {
  test('starts supervised workers, prints their addresses, serves, and stops them all on SIGTERM', async () => {
    const child = spawn(
      process.execPath,
      [
        CLI_PATH,
        'serve',
        '--disaggregated',
        '--prefill',
        '1',
        '--decode',
        '1',
        '--port',
        '0',
        '--model',
        model,
        '--served-model-name',
        MODEL_ID,
        '--backend',
        'reference',
        '--kv-pages',
        '64',
        '--log-level',
        'silent',
        '--incidents-db',
        `${testModelFile(SERVING_MODEL)}.incidents.sqlite`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start within 60 s:\n${output}`)), 60_000);
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        const match = /on (http:\/\/\S+)\n/.exec(output);
        if (match !== null) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      };
      child.stdout.on('data', read);
      child.stderr.on('data', read);
    });
    assert.match(output, /prefill worker prefill-0: control 127\.0\.0\.1:\d+/);
    assert.match(output, /decode worker decode-0: control 127\.0\.0\.1:\d+, KV transfers 127\.0\.0\.1:\d+/);
    assert.doesNotMatch(output, /[0-9a-f]{64}/, 'the generated cluster secret is never printed');
    const r = await post({ url }, '/v1/completions', {
      model: MODEL_ID,
      prompt: [5, 6, 7],
      max_tokens: 4,
      temperature: 0,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const code = await new Promise<number | null>((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGTERM');
    });
    assert.equal(code, 0);
  });

  test('a missing key file or admin token is refused before any worker starts: one line, exit 1', () => {
    // found after every worker had loaded the model (minutes, for a large one), below the workers' start-up output
    for (const flag of ['--api-keys', '--admin-token-file']) {
      const r = runCli(['serve', '--disaggregated', '--model', model, '--kv-pages', '64', flag, '/no/such/file']);
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, /^kvfence: .*\/no\/such\/file/);
      assert.doesNotMatch(r.stdout + r.stderr, /worker|weights/, `${flag}: refused before any worker started`);
    }
  });
});
