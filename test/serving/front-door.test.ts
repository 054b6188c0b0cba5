// The gateway's front door against strangers and slow clients (DESIGN I11, I12): timeouts on headers, bodies and idle
// connections; the key checked before any body byte is read; a body limit derived from the served context; a bound on
// unauthenticated connections per source address; /metrics' per-tenant series only for the admin token.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { bodyLimitFor } from '../../src/gateway/body-limit.js';
import { LINGER_BYTES_MAX } from '../../src/gateway/http-limits.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { CONNECTIONS_GRACE_MS } from '../../src/launch/drain-http.js';
import { loadModel } from '../../src/model/load-model.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { bodyOf, postHead, rawConnect, statusOf } from './raw-http.js';
import { keyFor, MODEL_ID, post, SERVING_MODEL, startTestServer, waitFor, writeKeyFile } from './serve-helpers.js';

const HEADERS_MS = 600;
const BODY_MS = 1_200;
const PER_ADDRESS = 4;
const DRAIN_MS = 300;
const ADMIN_TOKEN = 'admin-token-0123456789abcdef';
const acme = `Bearer ${keyFor('acme')}`;

/** the body limit of the test model's 256-token context */
const limit = bodyLimitFor(256, loadModel(testModelFile(SERVING_MODEL)).tokenizer).bytes;

let server: RunningServer;
before(async () => {
  const tokenFile = join(tempDirectory('kvfence-front-door-'), 'admin-token');
  writeFileSync(tokenFile, `${ADMIN_TOKEN}\n`);
  server = await startTestServer({
    apiKeysPath: writeKeyFile(['acme', 'other']),
    adminTokenFile: tokenFile,
    http: {
      headersTimeoutMs: HEADERS_MS,
      bodyTimeoutMs: BODY_MS,
      keepAliveTimeoutMs: 1_000,
      unauthConnectionsPerAddress: PER_ADDRESS,
    },
  });
});
after(async () => {
  await server?.close();
});

describe('authentication before the body', () => {
  test('an announced body without a key: 401 at once, nothing read, connection closed', async () => {
    const c = await rawConnect(server.url);
    // within the body limit, and never sent: a handler that read the body first would answer 408 after BODY_MS
    c.socket.write(postHead('/v1/chat/completions', limit));
    const closedMs = await c.closed(HEADERS_MS);
    assert.equal(statusOf(c.received()), 401);
    assert.equal((bodyOf(c.received()) as { error: { code: string } }).error.code, 'invalid_api_key');
    assert.match(c.received(), /\r\nconnection: close\r\n/i);
    assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms, before any timeout`);
  });

  test('a stranger who keeps uploading is cut off with the 401, not after the body timeout', async () => {
    const c = await rawConnect(server.url);
    c.socket.write(postHead('/v1/completions', 100_000_000, 'Bearer not-a-key'));
    c.dribble('x'.repeat(4096), 5);
    const closedMs = await c.closed(BODY_MS);
    assert.equal(statusOf(c.received()), 401);
    assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms`);
  });

  test('an upload refused unread (401, 413) is closed in stages: the client reads the refusal before any reset', async () => {
    // 8 MiB is more than the two kernels' buffers hold, so it is still being sent when the refusal comes; closed at
    // once, the server's kernel answers the rest with a reset, which fetch reports as a broken connection (EPIPE,
    // ECONNRESET) and the OpenAI SDKs retry, uploading it all again. This client never stops sending, so it is reset
    // once the linger is over: by then it holds the refusal.
    const upload = 8 * 1024 * 1024;
    for (const [auth, size, status] of [
      ['Bearer not-a-key', upload, 401],
      [acme, limit + upload, 413],
    ] as const) {
      const c = await rawConnect(server.url);
      let beforeReset: string | undefined;
      c.socket.on('error', () => {
        beforeReset ??= c.received();
      });
      c.socket.write(postHead('/v1/completions', size, auth));
      c.socket.write(Buffer.alloc(size, 'x'));
      const closedMs = await c.closed(BODY_MS);
      assert.equal(statusOf(beforeReset ?? c.received()), status, `${status}: closed after ${closedMs.toFixed(0)} ms`);
    }
    // as fetch (the OpenAI SDK's transport) sees it
    for (const [auth, size, status] of [
      ['Bearer not-a-key', upload, 401],
      [acme, limit + upload, 413],
    ] as const) {
      const r = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: Buffer.alloc(size, 'x'),
        signal: AbortSignal.timeout(BODY_MS * 4),
      });
      await r.text();
      assert.equal(r.status, status);
    }
  });

  test('a stranger who keeps uploading after the refusal has at most LINGER_BYTES_MAX more of it read', async () => {
    // read at full speed for the whole linger, it was hundreds of MB a connection (a core's worth of the event loop)
    const http = server.gateway.app.server;
    let socket: Socket | undefined;
    let readAtRefusal = 0;
    const onRequest = (request: IncomingMessage, response: ServerResponse) => {
      socket = request.socket;
      response.once('finish', () => {
        readAtRefusal = request.socket.bytesRead;
      });
    };
    http.on('request', onRequest);
    try {
      const c = await rawConnect(server.url, '127.0.0.1', { allowHalfOpen: true });
      c.socket.write(postHead('/v1/completions', 1e12, 'Bearer not-a-key'));
      const chunk = Buffer.alloc(1024 * 1024, 'x');
      const pump = () => {
        while (!c.socket.destroyed && c.socket.write(chunk));
      };
      c.socket.on('drain', pump);
      pump();
      const closedMs = await c.closed(BODY_MS);
      assert.equal(statusOf(c.received()), 401);
      assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms`);
      assert.ok(socket !== undefined);
      const readAfter = socket.bytesRead - readAtRefusal;
      // a read or two (64 KiB each) may pass the bound before the connection stops reading
      assert.ok(readAfter <= LINGER_BYTES_MAX + 2 * 64 * 1024, `${readAfter} bytes read after the refusal`);
    } finally {
      http.off('request', onRequest);
    }
  });

  test('the dashboard login, which takes no API key, refuses any body but a small form before reading it', async () => {
    for (const [length, contentType, status] of [
      [limit, 'application/json', 400], // Unsupported Media Type; within the API's body limit
      [limit, 'application/x-www-form-urlencoded', 413],
    ] as const) {
      const c = await rawConnect(server.url);
      c.socket.write(postHead('/dashboard/login', length).replace('application/json', contentType));
      c.dribble('x'.repeat(1000), 5);
      const closedMs = await c.closed(BODY_MS);
      assert.equal(statusOf(c.received()), status, contentType);
      assert.ok(closedMs < HEADERS_MS, `${contentType}: closed after ${closedMs.toFixed(0)} ms, before any timeout`);
    }
  });

  test('every route but health and metrics needs a key', async () => {
    for (const [method, path] of [
      ['GET', '/v1/models'],
      ['GET', '/v1/models/x'],
      ['POST', '/tokenize'],
      ['POST', '/v1/chat/completions'],
    ] as const) {
      assert.equal((await fetch(`${server.url}${path}`, { method })).status, 401, path);
    }
    for (const path of ['/health', '/health/live', '/health/ready', '/metrics']) {
      assert.equal((await fetch(`${server.url}${path}`)).status, 200, path);
    }
    const r = await post(server, '/v1/completions', { model: MODEL_ID, prompt: 'hi', max_tokens: 2 }, 'acme');
    assert.equal(r.status, 200);
  });

  test('an unknown route with an announced body: 404 at once, body unread, connection closed', async () => {
    const c = await rawConnect(server.url);
    c.socket.write(postHead('/v1/embeddings', limit));
    const closedMs = await c.closed(HEADERS_MS);
    assert.equal(statusOf(c.received()), 404);
    assert.equal((bodyOf(c.received()) as { error: { code: string } }).error.code, 'not_found');
    assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms`);
  });

  test('a GET with a body, on a route open to all, is refused before the body is read: 400 at once, closed', async () => {
    // fastify ignores a GET's body, and node read all of it to drop it until the body timeout: a stranger uploading
    // endlessly to /health was read at full speed for 30 s a connection (128 connections an address)
    for (const head of [
      'GET /health/live HTTP/1.1\r\nhost: kvfence\r\ncontent-length: 1000000000000\r\n\r\n',
      'GET /metrics HTTP/1.1\r\nhost: kvfence\r\ntransfer-encoding: chunked\r\n\r\n',
    ]) {
      const c = await rawConnect(server.url, '127.0.0.1', { allowHalfOpen: true });
      c.socket.write(head);
      c.dribble(head.includes('chunked') ? '1000\r\n' + 'x'.repeat(4096) + '\r\n' : 'x'.repeat(4096), 5);
      const closedMs = await c.closed(HEADERS_MS);
      assert.equal(statusOf(c.received()), 400, c.received());
      assert.match((bodyOf(c.received()) as { error: { message: string } }).error.message, /takes no body/);
      assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms`);
    }
    // without a body, or an empty one, these routes answer as ever
    const c = await rawConnect(server.url);
    c.socket.write('GET /health/live HTTP/1.1\r\nhost: kvfence\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    await c.closed(HEADERS_MS);
    assert.equal(statusOf(c.received()), 200);
  });

  test('requests pipelined behind a refusal that closes the connection are not run: one answer, no generation', async () => {
    const requestsOf = async (tenant: string) => {
      const text = await (
        await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
      ).text();
      const counted = text.split('\n').filter((line) => line.startsWith(`kvfence_requests_total{tenant="${tenant}"`));
      return counted.reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
    };
    const body = JSON.stringify({ model: MODEL_ID, prompt: 'pipelined', max_tokens: 4 });
    const completion = (authorization?: string) =>
      postHead('/v1/completions', Buffer.byteLength(body), authorization) + body;
    const before = await requestsOf('acme');
    const c = await rawConnect(server.url);
    // a stranger's request, then two of acme's on the same connection, in one write
    c.socket.write(completion() + completion(acme) + completion(acme));
    await c.closed(HEADERS_MS);
    assert.equal(statusOf(c.received()), 401);
    assert.equal(c.received().match(/^HTTP\/1\.1 /gm)?.length, 1, 'one answer: the refusal');
    await new Promise((resolve) => setTimeout(resolve, 300)); // time for a request run anyway to be counted
    assert.equal(await requestsOf('acme'), before, "acme's pipelined requests were not run");
  });
});

describe('timeouts', () => {
  test('headers that never finish: 408 and closed after the headers timeout', async () => {
    const c = await rawConnect(server.url);
    c.socket.write('POST /v1/completions HTTP/1.1\r\n');
    c.dribble('x-slow: 1\r\n', 50);
    const closedMs = await c.closed(HEADERS_MS + 2_000);
    assert.equal(statusOf(c.received()), 408);
    assert.ok(closedMs >= HEADERS_MS * 0.9 && closedMs < HEADERS_MS + 1_000, `closed after ${closedMs.toFixed(0)} ms`);
  });

  test("a tenant's body that never finishes: 408 and closed after the body timeout", async () => {
    const c = await rawConnect(server.url);
    c.socket.write(postHead('/v1/completions', 10_000, acme));
    c.dribble(' ', 50);
    const closedMs = await c.closed(BODY_MS + 2_000);
    assert.equal(statusOf(c.received()), 408);
    assert.ok(closedMs >= BODY_MS * 0.9 && closedMs < BODY_MS + 1_000, `closed after ${closedMs.toFixed(0)} ms`);
  });

  test('a silent connection is closed after the headers timeout', async () => {
    const c = await rawConnect(server.url);
    const closedMs = await c.closed(HEADERS_MS + 2_000);
    assert.ok(closedMs >= HEADERS_MS * 0.9 && closedMs < HEADERS_MS + 1_000, `closed after ${closedMs.toFixed(0)} ms`);
  });
});

describe('body limit from the served context', () => {
  test('the limit is what the context can need: 256 tokens × the longest token × 6, plus the other fields', () => {
    const { tokenizer } = loadModel(testModelFile(SERVING_MODEL));
    let longest = 0;
    for (let id = 0; id < tokenizer.vocabSize; id++)
      longest = Math.max(longest, Buffer.byteLength(tokenizer.tokenText(id)), tokenizer.decodeBytes([id]).length);
    const headroom = 4096 * 128 + 2 * 256 * 1024 + 64 * 1024;
    assert.equal(limit, 256 * longest * 6 + headroom);
    assert.ok(limit < 16 * 1024 * 1024, `${limit} bytes, below the old fixed 16 MiB`);
  });

  test('one byte over the limit, announced: 413 naming the limit, before the body is read', async () => {
    const c = await rawConnect(server.url);
    c.socket.write(postHead('/v1/completions', limit + 1, acme));
    const closedMs = await c.closed(HEADERS_MS);
    assert.ok(closedMs < HEADERS_MS, `closed after ${closedMs.toFixed(0)} ms`);
    assert.equal(statusOf(c.received()), 413);
    const error = (bodyOf(c.received()) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'request_too_large');
    assert.ok(error.message.includes(`${limit} bytes`), error.message);
    assert.ok(error.message.includes('256-token context'), error.message);
  });

  test('a body of exactly the limit is read and served', async () => {
    const json = JSON.stringify({ model: MODEL_ID, prompt: 'hi', max_tokens: 2 });
    const response = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: acme },
      body: json + ' '.repeat(limit - json.length),
    });
    assert.equal(response.status, 200);
    await response.arrayBuffer();
  });

  test('a chunked body that grows past the limit: 413', async () => {
    const c = await rawConnect(server.url);
    c.socket.write(
      `POST /v1/completions HTTP/1.1\r\nhost: kvfence\r\ncontent-type: application/json\r\n` +
        `transfer-encoding: chunked\r\nauthorization: ${acme}\r\n\r\n`,
    );
    const chunk = 256 * 1024;
    for (let sent = 0; sent <= limit; sent += chunk)
      c.socket.write(`${chunk.toString(16)}\r\n${' '.repeat(chunk)}\r\n`);
    await c.closed(BODY_MS);
    assert.equal(statusOf(c.received()), 413);
  });
});

describe('unauthenticated connections per address', () => {
  test(`past ${PER_ADDRESS} from one address the next is closed at once; authenticating frees a slot`, async () => {
    // 127.0.0.5: an address no other test (nor fetch's pool) uses
    const held = await Promise.all(Array.from({ length: PER_ADDRESS }, () => rawConnect(server.url, '127.0.0.5')));
    const refused = await rawConnect(server.url, '127.0.0.5');
    const refusedMs = await refused.closed(HEADERS_MS / 2);
    assert.equal(refused.received(), '', 'closed without an answer');
    assert.ok(refusedMs < HEADERS_MS / 2);
    // another address is not affected
    const elsewhere = await rawConnect(server.url, '127.0.0.6');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(elsewhere.socket.destroyed, false);
    // one held connection authenticates: it no longer counts, so a new one from the address stays
    held[0]!.socket.write(`GET /v1/models HTTP/1.1\r\nhost: kvfence\r\nauthorization: ${acme}\r\n\r\n`);
    await waitFor(() => statusOf(held[0]!.received()) === 200, 'the authenticated answer');
    const admitted = await rawConnect(server.url, '127.0.0.5');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(admitted.socket.destroyed, false);
    assert.equal(held[0]!.socket.destroyed, false, 'the authenticated connection stays');
    // the bound counts again once the unauthenticated ones time out
    for (const c of [...held.slice(1), admitted, elsewhere]) await c.closed(HEADERS_MS + 2_000);
    const again = await rawConnect(server.url, '127.0.0.5');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(again.socket.destroyed, false);
    again.socket.destroy();
    held[0]!.socket.destroy();
  });
});

describe('/metrics per-tenant series', () => {
  const metrics = async (url: string, authorization?: string) =>
    (await fetch(`${url}/metrics`, authorization !== undefined ? { headers: { authorization } } : {})).text();

  test('only the admin token sees tenant names; aggregate series are public', async () => {
    const r = await post(server, '/v1/completions', { model: MODEL_ID, prompt: 'hi', max_tokens: 2 }, 'acme');
    assert.equal(r.status, 200);
    for (const authorization of [undefined, acme, 'Bearer admin-token-0123456789abcdeX']) {
      const text = await metrics(server.url, authorization);
      assert.ok(text.includes('vllm:num_requests_running'), 'aggregate series are served');
      assert.ok(text.includes('kvfence_http_unauthenticated_connections'));
      assert.ok(!text.includes('tenant='), `no tenant label for ${authorization}`);
      assert.ok(!text.includes('"acme"') && !text.includes('"other"'), `no tenant name for ${authorization}`);
    }
    const full = await metrics(server.url, `Bearer ${ADMIN_TOKEN}`);
    assert.ok(full.includes('kvfence_tenant_kv_pages{tenant="acme"} 0'));
    assert.ok(full.includes('kvfence_tenant_requests_in_flight{tenant="other"} 0'));
    assert.match(full, /kvfence_requests_total\{tenant="acme",outcome="completed"\} [1-9]/);
    assert.ok(full.includes('kvfence_isolation_incidents_total{tenant="acme"} 0'));
  });

  test('without --admin-token-file no one sees them', async () => {
    const plain = await startTestServer({ apiKeysPath: writeKeyFile(['acme']) });
    try {
      for (const authorization of [undefined, acme, `Bearer ${ADMIN_TOKEN}`]) {
        const text = await metrics(plain.url, authorization);
        assert.ok(text.includes('kvfence_kv_pages_free'));
        assert.ok(!text.includes('tenant=') && !text.includes('acme'));
      }
    } finally {
      await plain.close();
    }
  });
});

describe('health', () => {
  test('colocated: live and ready while serving; not ready once shutting down', async () => {
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    const h = (await health.json()) as Record<string, unknown>;
    assert.equal(h['status'], 'ok');
    assert.deepEqual(Object.keys(h).sort(), ['kvPagesFree', 'kvPagesTotal', 'running', 'status', 'waiting']);
    const ready = await fetch(`${server.url}/health/ready`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { status: 'ready' });
    server.gateway.state.shuttingDown = true;
    try {
      const notReady = await fetch(`${server.url}/health/ready`);
      assert.equal(notReady.status, 503);
      assert.deepEqual(await notReady.json(), { status: 'not_ready', shuttingDown: true });
      const h503 = await fetch(`${server.url}/health`);
      assert.equal(h503.status, 503);
      assert.equal(((await h503.json()) as { status: string }).status, 'shutting_down');
      const live = await fetch(`${server.url}/health/live`);
      assert.equal(live.status, 200);
      assert.deepEqual(await live.json(), { status: 'live' });
    } finally {
      server.gateway.state.shuttingDown = false;
    }
  });
});

describe('shutdown', () => {
  test('a connection that never finishes its request holds neither a drain nor a close', async () => {
    // node stops its headers and body timeouts once its server closes: a stranger's half-sent head or a body that
    // never ends held the close, and SIGTERM's drain with it, for ever
    for (const stop of ['drain', 'close'] as const) {
      const s = await startTestServer({
        apiKeysPath: writeKeyFile(['acme']),
        http: { headersTimeoutMs: HEADERS_MS, bodyTimeoutMs: BODY_MS, keepAliveTimeoutMs: 1_000 },
      });
      const head = await rawConnect(s.url);
      head.socket.write('POST /v1/completions HTTP/1.1\r\nhost: kvfence\r\n');
      const body = await rawConnect(s.url);
      body.socket.write(postHead('/v1/completions', 1_000, acme));
      body.socket.write('{"model"');
      await new Promise((resolve) => setTimeout(resolve, 100));
      const boundMs = DRAIN_MS + CONNECTIONS_GRACE_MS + 1_500;
      const started = performance.now();
      let timer: NodeJS.Timeout | undefined;
      try {
        const stopped = stop === 'drain' ? s.drain(DRAIN_MS) : s.close();
        const late = new Promise<'late'>((resolve) => {
          timer = setTimeout(() => resolve('late'), boundMs);
        });
        assert.notEqual(await Promise.race([stopped, late]), 'late', `${stop}: still open after ${boundMs} ms`);
        await Promise.all([head.closed(1_000), body.closed(1_000)]);
      } finally {
        clearTimeout(timer);
        head.socket.destroy();
        body.socket.destroy();
      }
      const tookMs = performance.now() - started;
      assert.ok(tookMs >= (stop === 'drain' ? DRAIN_MS : 0), `${stop} took ${tookMs.toFixed(0)} ms`);
    }
  });
});
