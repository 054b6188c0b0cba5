import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { KvfenceError } from '../util/errors.js';
import { bodyAs } from './body-readers.js';
import { JsonBodyParser } from './json-body.js';
import { parseChatRequest } from './schemas.js';

const parser = new JsonBodyParser(60_000, { id: 'm', vocabSize: 600 });
after(() => parser.close());

/** A request body of about `bytes` bytes: a long prompt with multi-byte letters, and many small messages. */
function largeRequest(bytes: number): unknown {
  return {
    model: 'm',
    prompt: 'Grüße, 世界 — '.repeat(Math.ceil(bytes / 2 / 19)),
    messages: Array.from({ length: Math.ceil(bytes / 2 / 48) }, (_, i) => ({ role: 'user', content: `n${i}`, w: i })),
    logit_bias: { '17': -100, '4': 2.5 },
    stream: true,
  };
}

const refusedAs400 = (error: unknown) =>
  error instanceof KvfenceError && error.code === 'invalid_request_error' && /JSON|empty/.test(error.message);

test('a large body is moved to the thread and parsed to the same value, while the event loop keeps running', async () => {
  const request = largeRequest(8 << 20);
  const body = Buffer.from(JSON.stringify(request));
  assert.ok(body.byteOffset === 0 && body.byteLength === body.buffer.byteLength, 'the body owns its buffer');
  const { value, ticks, ms } = await whileTicking(() => parser.parse(body, 'a', undefined));
  assert.deepEqual(value, request);
  assert.equal(body.buffer.byteLength, 0, 'moved, not copied: the buffer is detached here');
  // parsed inline, the loop would not tick once in those milliseconds; here it ticks most of them
  assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms of parsing`);
});

test('a large body inside a shared buffer is copied out, leaving the buffer whole', async () => {
  const request = largeRequest(256 << 10);
  const text = JSON.stringify(request);
  const shared = Buffer.from(`xx${text}yy`);
  const value = await parser.parse(shared.subarray(2, shared.length - 2), 'a', undefined);
  assert.deepEqual(value, request);
  assert.equal(shared.toString('utf8', 2, shared.length - 2), text, 'the shared buffer is untouched');
});

test('small bodies parse inline to the same value', async () => {
  const request = { model: 'm', prompt: 'hi ☃', max_tokens: 3, stop: ['\n'] };
  assert.deepEqual(await parser.parse(Buffer.from(JSON.stringify(request)), 'a', undefined), request);
});

test('empty, broken and prototype-carrying bodies are 400s, inline and on the thread', async () => {
  const pad = 'p'.repeat(128 << 10); // past the inline bound
  for (const extra of ['', `,"pad":"${pad}"`]) {
    for (const text of [
      `{"model":"m"${extra}`,
      `{"model":"m"${extra},"__proto__":{"admin":true}}`,
      `{"model":"m"${extra},"constructor":{"prototype":{"admin":true}}}`,
    ]) {
      await assert.rejects(
        parser.parse(Buffer.from(text), 'a', undefined),
        refusedAs400,
        `${text.slice(0, 40)} (${text.length} bytes)`,
      );
    }
  }
  await assert.rejects(parser.parse(Buffer.alloc(0), 'a', undefined), refusedAs400);
});

test('one tenant has at most 4 large bodies on the thread: its fifth is a 429 at once, another tenant is parsed', async () => {
  const request = largeRequest(2 << 20);
  const text = JSON.stringify(request);
  const flood = Array.from({ length: 6 }, () =>
    parser.parse(Buffer.from(text), 'flood', undefined).then(
      () => 'parsed',
      (e: unknown) => (e instanceof KvfenceError ? e.code : String(e)),
    ),
  );
  const other = parser.parse(Buffer.from(text), 'calm', undefined);
  const outcomes = await Promise.all(flood);
  assert.deepEqual(outcomes.sort(), [
    'parsed',
    'parsed',
    'parsed',
    'parsed',
    'rate_limit_exceeded',
    'rate_limit_exceeded',
  ]);
  assert.deepEqual(await other, request);
  // answered ones free their places
  assert.deepEqual(await parser.parse(Buffer.from(text), 'flood', undefined), request);
});

test('a route’s body is read where it is parsed: only the validated request comes back, a refusal never does', async () => {
  const chat = (extra: object) => ({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 4,
    ...extra,
  });
  const messages = Array.from({ length: 3000 }, (_, i) => ({ role: 'user', content: `n${i} ${'x'.repeat(80)}` }));
  const large = chat({ messages }); // past the inline bound: read on the thread
  for (const body of [chat({}), large]) {
    const read = await parser.parse(Buffer.from(JSON.stringify(body)), 'a', '/v1/chat/completions');
    assert.deepEqual(bodyAs(read, 'chat'), parseChatRequest(body, 600));
    assert.throws(() => bodyAs(read, 'completion'), /must be a JSON object/);
    assert.throws(() => bodyAs(JSON.stringify(body), 'chat'), /must be a JSON object/); // a text/plain body
  }
  // 470k empty objects under a field no route reads: their graph back from the thread held the loop 0.25–0.5 s
  const junk = `{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":[${Array(470_000).fill('{}')}]}`;
  const junkValue = JSON.parse(junk) as unknown;
  const cloneMs = timed(() => structuredClone(junkValue));
  const { value, longestGapMs } = await whileTicking(() =>
    parser.parse(Buffer.from(junk), 'a', '/v1/chat/completions'),
  );
  // the refusal comes back for the route to throw (thrown by the parser, fastify would close the connection)
  assert.throws(
    () => bodyAs(value, 'chat'),
    (e: unknown) => e instanceof KvfenceError && e.param === 'metadata',
  );
  assert.ok(
    longestGapMs < cloneMs / 4,
    `the loop stalled ${longestGapMs.toFixed(0)} ms (a clone: ${cloneMs.toFixed(0)} ms)`,
  );
  const detokenize = await parser.parse(Buffer.from('{"tokens":[1,2,3]}'), 'a', '/detokenize');
  assert.deepEqual(bodyAs(detokenize, 'detokenize'), { count: 3, tokens: [1, 2, 3] });
  const outside = await parser.parse(Buffer.from('{"tokens":[600]}'), 'a', '/detokenize');
  assert.deepEqual(
    bodyAs(outside, 'detokenize'),
    { count: 1, tokens: undefined },
    'the route says why, after the length',
  );
});

function timed(work: () => unknown): number {
  const started = performance.now();
  work();
  return performance.now() - started;
}
