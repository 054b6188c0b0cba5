/**
 * The auditor's parts: key file formats, the SSE reader, canary matching, context fields, and the endpoint's bounded
 * reads (against a bare HTTP server).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { CanaryIndex } from '../../src/audit/canary.js';
import { Endpoint } from '../../src/audit/endpoint.js';
import { parseAuditKeys } from '../../src/audit/keys-file.js';
import { advertisedContext } from '../../src/audit/scenario-context.js';
import { SseReader } from '../../src/audit/sse.js';
import { KvfenceError } from '../../src/util/errors.js';

describe('audit key file', () => {
  it('reads "tenant key" lines and JSON, grouping keys by tenant', () => {
    const text = parseAuditKeys('# c\n\nacme k1\nacme k2\nglobex   k3\n', 'f');
    assert.deepEqual(text, [
      { name: 'acme', keys: ['k1', 'k2'] },
      { name: 'globex', keys: ['k3'] },
    ]);
    const json = parseAuditKeys('[{"tenant":"a","key":"x"},{"tenant":"b","key":"y"}]', 'f');
    assert.deepEqual(
      json.map((t) => t.name),
      ['a', 'b'],
    );
  });

  it('refuses one tenant, a shared key, and malformed lines with the line number', () => {
    assert.throws(() => parseAuditKeys('acme k1\nacme k2\n', 'f'), /at least 2 tenants/);
    assert.throws(() => parseAuditKeys('acme k1\nglobex k1\n', 'f'), /share a key/);
    assert.throws(
      () => parseAuditKeys('acme k1\nglobex\n', 'f'),
      (e: unknown) => e instanceof KvfenceError && /f:2/.test(e.message),
    );
  });
});

describe('SseReader', () => {
  it('joins events split anywhere, with \\r\\n or \\n, and ignores comments', () => {
    const sse = new SseReader(1000);
    const got = [...sse.push('data: {"a"'), ...sse.push(':1}\r\n\r\n: keep-alive\n\ndata:[DONE]\n'), ...sse.push('\n')];
    assert.deepEqual(got, ['{"a":1}', '[DONE]']);
  });

  it('refuses an unbounded line', () => {
    const sse = new SseReader(16);
    assert.throws(() => sse.push(`data: ${'x'.repeat(40)}`), /longer than 16/);
  });
});

describe('CanaryIndex', () => {
  it('finds another tenant’s marker split by spaces and case, not the reader’s own', () => {
    const index = new CanaryIndex(12);
    const a = index.issue('alpha');
    const m = a.marker;
    const split = `ok ${m.slice(0, 5).toUpperCase()} ${m.slice(5, 11)}-${m.slice(11, 20)}, ${m[20] === 'z' ? 'y' : 'z'}`;
    const found = index.scan(split, 'beta');
    assert.equal(found.length, 1);
    assert.equal(found[0]!.owner.tenant, 'alpha');
    assert.equal(found[0]!.matched, m.slice(0, 20));
    assert.deepEqual(index.scan(split, 'alpha'), []);
    assert.deepEqual(index.scan(m.slice(0, 11), 'beta'), [], 'fewer than matchCharsMin characters is no match');
  });
});

describe('advertisedContext', () => {
  it('reads the field names servers use', () => {
    assert.equal(advertisedContext({ data: [{ id: 'm', max_model_len: 4096 }] }, 'm'), 4096);
    assert.equal(advertisedContext({ data: [{ id: 'x' }, { id: 'm', context_length: 8192 }] }, 'm'), 8192);
    assert.equal(advertisedContext({ data: [{ id: 'm', meta: { n_ctx_train: 2048 } }] }, 'm'), 2048);
    assert.equal(advertisedContext({ data: [{ id: 'm' }] }, 'm'), undefined);
  });
});

describe('Endpoint', () => {
  it('reads a body up to the byte bound and keeps what fits; a stream cut by the client still has its events scanned', async () => {
    const head = JSON.stringify({ choices: [{ index: 0, text: 'start kvfqmarker' }], pad: 'x'.repeat(4000) });
    const events = ['first', 'second', 'third-kvfqlate']
      .map((text) => `data: ${JSON.stringify({ choices: [{ index: 0, text }] })}\n\n`)
      .join('');
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', () => {
        const stream = (JSON.parse(body) as { stream: boolean }).stream;
        res.writeHead(200, { 'content-type': stream ? 'text/event-stream' : 'application/json' });
        res.end(stream ? events : head); // one write: the events arrive together
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const endpoint = new Endpoint({
        baseUrl: `http://127.0.0.1:${port}/v1`,
        model: 'm',
        api: 'completions',
        timeoutMs: 5_000,
        responseBytesMax: 1_000,
        seed: 1,
      });
      const tenant = { name: 'a', keys: ['k'] };
      const spec = { tenant, scenario: 's', label: 'l', prompt: 'p', maxTokens: 4, greedy: false };
      const whole = await endpoint.complete({ ...spec, stream: false });
      assert.equal(whole.truncated, true);
      assert.ok(
        whole.errorBody.includes('kvfqmarker') && whole.errorBody.length === 1_000,
        String(whole.errorBody.length),
      );
      const cut = await endpoint.complete({ ...spec, stream: true, abortAfterDeltas: 1 });
      assert.deepEqual([cut.abortedByClient, cut.deltas], [true, ['first']]);
      assert.match(cut.fields.get('choices[0].text') ?? '', /third-kvfqlate/);
    } finally {
      server.close();
    }
  });
});
