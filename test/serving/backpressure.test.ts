/**
 * Backpressure for streams (issue 12), end to end on a colocated server: clients that stop reading their streams have
 * their requests cancelled like a disconnect (pages back, tenant counters back, connection closed) with what the
 * server holds for them bounded, while another tenant is served; a client that reads slowly is not cut.
 *
 * The clients are connections handed to the server's HTTP listener as in-memory duplex streams (node's documented way
 * to inject a connection) that take bytes only when the test says so. Over loopback TCP the kernel would first absorb
 * about 4 MiB per connection (measured: `write` returns false only after ~4.2 MB), minutes of tokens of the test
 * model; the real-TCP side (the reset, the kernel's share) is tested in src/gateway/stream-writer.test.ts.
 */
import assert from 'node:assert/strict';
import { Duplex } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { ENGINE_PARTS } from '../../src/engine/engine-parts.js';
import { CompletionRun } from '../../src/gateway/completion-run.js';
import type { StreamBounds } from '../../src/gateway/stream-writer.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { loadTestModel } from '../helpers/models.js';
import {
  assertPoolWhole,
  keyFor,
  MODEL_ID,
  post,
  SERVING_MODEL,
  startTestServer,
  waitFor,
  writeKeyFile,
} from './serve-helpers.js';

const BOUNDS: StreamBounds = { bufferedBytesMax: 32 * 1024, drainTimeoutMs: 300 };

/**
 * A colocated server for a describe's tests whose streams have `bounds`, open for them (before/after), and a way to
 * hand it a client connection.
 */
function boundedServer(tenants: string[], bounds: StreamBounds) {
  class BoundedStreams extends CompletionRun {
    protected override streamBounds(): StreamBounds {
      return bounds;
    }
  }
  const held: { server?: RunningServer } = {};
  before(async () => {
    held.server = await startTestServer(
      { apiKeysPath: writeKeyFile(tenants), kvPages: 256 },
      { ...ENGINE_PARTS, completionRun: BoundedStreams },
    );
  });
  after(async () => {
    await held.server?.close();
  });
  return {
    server: () => held.server!,
    connect: (client: Client) => held.server!.gateway.app.server.emit('connection', client),
  };
}

/**
 * A client connection that takes the server's bytes only when `readNow` is called: until then they wait in the server
 * (this stream's writable buffer is the server's send buffer; a small high-water mark, like a full socket).
 */
class Client extends Duplex {
  received = '';
  /** the most bytes the server held for this connection, sampled */
  peakHeld = 0;
  private pending: (() => void) | undefined;
  private reading = false;
  private readonly sampler = setInterval(() => {
    this.peakHeld = Math.max(this.peakHeld, this.writableLength);
  }, 1);

  constructor(body: object, tenant: string, path = '/v1/chat/completions') {
    super({ writableHighWaterMark: 1024 });
    const json = JSON.stringify(body);
    this.push(
      `POST ${path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n` +
        `authorization: Bearer ${keyFor(tenant)}\r\ncontent-length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
    );
  }

  /** Reads everything the server holds for it now (later writes wait again). */
  readNow(): void {
    this.reading = true;
    const pending = this.pending;
    this.pending = undefined;
    pending?.();
    setImmediate(() => {
      this.reading = false;
    });
  }

  override _read(): void {}

  override _writev(chunks: { chunk: Buffer }[], callback: () => void): void {
    for (const { chunk } of chunks) this.received += chunk.toString('utf8');
    if (this.reading) process.nextTick(callback);
    else this.pending = callback;
  }

  override _destroy(error: Error | null, callback: (error: Error | null) => void): void {
    clearInterval(this.sampler);
    callback(error);
  }
}

const UNREAD = 6;
const MAX_TOKENS = 200;

function streamBody(logprobs: boolean): object {
  return {
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'tell me a long story' }],
    max_tokens: MAX_TOKENS,
    ignore_eos: true,
    stream: true,
    ...(logprobs ? { logprobs: true, top_logprobs: 20 } : {}),
  };
}

async function outcomes(server: RunningServer, tenant: string): Promise<Record<string, number>> {
  const metric = await server.gateway.metrics.requests.get();
  const counts: Record<string, number> = {};
  for (const v of metric.values) if (v.labels['tenant'] === tenant) counts[String(v.labels['outcome'])] = v.value;
  return counts;
}

async function generatedTokens(server: RunningServer): Promise<number> {
  const metric = await server.gateway.metrics.generationTokens.get();
  return metric.values.reduce((sum, v) => sum + v.value, 0);
}

describe('streams whose clients stop reading', { timeout: 60_000 }, () => {
  const served = boundedServer(['stalled', 'slow', 'other'], BOUNDS);
  const connect = served.connect;

  it('are cancelled within the deadline with their buffers bounded, while another tenant is served', async () => {
    const server = served.server();
    const tokensBefore = await generatedTokens(server);
    const started = performance.now();
    const clients = Array.from({ length: UNREAD }, () => new Client(streamBody(true), 'stalled'));
    for (const c of clients) connect(c);
    await waitFor(() => server.worker.stats().running > 0, 'the unread streams to start');
    const other = await post(
      server,
      '/v1/chat/completions',
      { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, ignore_eos: true },
      'other',
    );
    assert.equal(other.status, 200);
    assert.equal((other.json as { usage: { completion_tokens: number } }).usage.completion_tokens, 8);

    await waitFor(() => clients.every((c) => c.destroyed), 'the server to close every unread connection', 10_000);
    await waitFor(() => server.gateway.gate.requestsOf('stalled') === 0, 'the stalled tenant to leave its gate');
    await waitFor(() => server.worker.stats().running === 0, 'the worker to drop the cancelled requests');
    const elapsedMs = performance.now() - started;
    assert.ok(elapsedMs < 10_000, `cancelled after ${elapsedMs} ms`);
    assertPoolWhole(server);
    assert.equal(server.gateway.gate.pagesOf('stalled'), 0);
    assert.deepEqual(await outcomes(server, 'stalled'), { cancelled: UNREAD });
    // cut early: nowhere near every stream's max_tokens was generated
    const generated = (await generatedTokens(server)) - tokensBefore - 8;
    assert.ok(generated < (UNREAD * MAX_TOKENS) / 4, `${generated} tokens generated for the unread streams`);
    for (const c of clients) {
      // the bound, the first chunk (headers and the role) and one more chunk, at most
      assert.ok(c.peakHeld <= BOUNDS.bufferedBytesMax + 8 * 1024, `held ${c.peakHeld} bytes`);
      assert.ok(!c.received.includes('[DONE]'));
    }
  });

  it('leave a slow reader that drains within the deadline alone', async () => {
    const server = served.server();
    const client = new Client(streamBody(false), 'slow');
    // reads every 10 ms: each pause leaves the server over the client's high-water mark (4–8 KB held), well within both
    // bounds (every 50 ms held ~31.8 KB against the 32 KiB bound once the forward pass got faster: cut now and then)
    const readEveryMs = 10;
    const reader = setInterval(() => client.readNow(), readEveryMs);
    const started = performance.now();
    connect(client);
    try {
      await waitFor(() => client.received.includes('data: [DONE]'), 'the slow stream to finish', 20_000);
    } finally {
      clearInterval(reader);
    }
    const elapsedMs = performance.now() - started;
    // blocked through at least one whole pause (not the speed of generation: that differs from machine to machine)
    assert.ok(elapsedMs > readEveryMs, `the stream waited for its reader (${elapsedMs} ms)`);
    assert.ok(readEveryMs < BOUNDS.drainTimeoutMs);
    assert.ok(client.peakHeld > client.writableHighWaterMark, `the server held ${client.peakHeld} bytes at times`);
    assert.match(client.received, /^HTTP\/1\.1 200 /);
    const contentChunks = client.received.split('\n\n').filter((e) => e.includes('"content"')).length;
    assert.ok(contentChunks > MAX_TOKENS / 2, `${contentChunks} chunks with content`);
    assert.match(client.received, /"finish_reason":"length"/);
    assert.deepEqual(await outcomes(server, 'slow'), { completed: 1 });
    await waitFor(() => server.worker.stats().running === 0, 'the worker to finish');
    assertPoolWhole(server);
    client.destroy();
  });
});

const ECHO_BOUNDS: StreamBounds = { bufferedBytesMax: 4 * 1024, drainTimeoutMs: 300 };

describe('a stream whose first chunks echo its prompt', { timeout: 60_000 }, () => {
  const served = boundedServer(['echo'], ECHO_BOUNDS);
  const connect = served.connect;

  it('is not cut for them when they are over the bound: the echoes of every choice are its first chunk', async () => {
    const server = served.server();
    // one write per choice's echo passed the bound after a few, unread for a moment: the stream was cut (I11 hunt)
    const n = 8;
    // the prompt as ids of the vocabulary's longest token (8 characters): 800 characters, n times over the bound, in a
    // request that fits the 256-token context
    const { tokenizer } = loadTestModel(SERVING_MODEL);
    const ids = Array.from({ length: tokenizer.vocabSize }, (_, id) => id);
    const longest = ids.reduce((a, b) => (tokenizer.decode([b]).length > tokenizer.decode([a]).length ? b : a));
    const prompt = Array.from({ length: 100 }, () => longest);
    assert.ok(n * tokenizer.decode(prompt).length > ECHO_BOUNDS.bufferedBytesMax, 'the echoes are more than the bound');
    const body = { model: MODEL_ID, prompt, echo: true, n, max_tokens: 2, stream: true };
    const client = new Client(body, 'echo', '/v1/completions');
    const reader = setInterval(() => client.readNow(), 10);
    connect(client);
    try {
      await waitFor(() => client.received.includes('data: [DONE]'), 'the echoing stream to finish', 20_000);
    } finally {
      clearInterval(reader);
    }
    const echo = JSON.stringify(tokenizer.decode(prompt));
    const echoes = client.received.split('\n\n').filter((e) => e.includes(echo));
    assert.equal(echoes.length, n);
    assert.deepEqual(await outcomes(server, 'echo'), { completed: 1 });
    client.destroy();
  });
});
