import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { whileTicking } from '../../test/helpers/event-loop-ticks.js';
import { KvfenceError } from '../util/errors.js';
import { JsonBodyParser } from './json-body.js';

const parser = new JsonBodyParser(60_000);
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
  const { value, ticks, ms } = await whileTicking(() => parser.parse(body, 'a'));
  assert.deepEqual(value, request);
  assert.equal(body.buffer.byteLength, 0, 'moved, not copied: the buffer is detached here');
  // parsed inline, the loop would not tick once in those milliseconds; here it ticks most of them
  assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms of parsing`);
});

test('a large body inside a shared buffer is copied out, leaving the buffer whole', async () => {
  const request = largeRequest(256 << 10);
  const text = JSON.stringify(request);
  const shared = Buffer.from(`xx${text}yy`);
  const value = await parser.parse(shared.subarray(2, shared.length - 2), 'a');
  assert.deepEqual(value, request);
  assert.equal(shared.toString('utf8', 2, shared.length - 2), text, 'the shared buffer is untouched');
});

test('small bodies parse inline to the same value', async () => {
  const request = { model: 'm', prompt: 'hi ☃', max_tokens: 3, stop: ['\n'] };
  assert.deepEqual(await parser.parse(Buffer.from(JSON.stringify(request)), 'a'), request);
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
        parser.parse(Buffer.from(text), 'a'),
        refusedAs400,
        `${text.slice(0, 40)} (${text.length} bytes)`,
      );
    }
  }
  await assert.rejects(parser.parse(Buffer.alloc(0), 'a'), refusedAs400);
});

test('one tenant has at most 4 large bodies on the thread: its fifth is a 429 at once, another tenant is parsed', async () => {
  const request = largeRequest(2 << 20);
  const text = JSON.stringify(request);
  const flood = Array.from({ length: 6 }, () =>
    parser.parse(Buffer.from(text), 'flood').then(
      () => 'parsed',
      (e: unknown) => (e instanceof KvfenceError ? e.code : String(e)),
    ),
  );
  const other = parser.parse(Buffer.from(text), 'calm');
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
  assert.deepEqual(await parser.parse(Buffer.from(text), 'flood'), request);
});
