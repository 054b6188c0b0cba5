// The official `openai` client against a live colocated server: chat and completions, streamed and not, logprobs,
// stop sequences, and every error case with its status and code.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import {
  adminMetrics,
  assertPoolWhole,
  clientFor,
  keyFor,
  MODEL_ID,
  post,
  startTestServer,
  waitFor,
  writeAdminTokenFile,
  writeKeyFile,
} from './serve-helpers.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({
    apiKeysPath: writeKeyFile(['acme', 'globex', 'solo'], { solo: { concurrentRequestsMax: 1 } }),
    adminTokenFile: writeAdminTokenFile(),
  });
});
after(async () => {
  await server?.close();
});

const messages = [{ role: 'user' as const, content: 'What is a page?' }];

async function expectApiError(
  call: () => Promise<unknown>,
  status: number,
  code: string,
): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await call();
  } catch (error) {
    assert.ok(error instanceof OpenAI.APIError, `an APIError, got ${String(error)}`);
    assert.equal(error.status, status, error.message);
    assert.equal(error.code, code);
    return error;
  }
  assert.fail(`expected ${status} ${code}`);
}

describe('chat completions', () => {
  test('non-streamed: text, usage, finish_reason and logprobs with top alternatives', async () => {
    const client = clientFor(server, 'acme');
    const r = await client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 12,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
    });
    const choice = r.choices[0]!;
    assert.equal(r.object, 'chat.completion');
    assert.equal(choice.finish_reason, 'length');
    assert.equal(r.usage?.completion_tokens, 12);
    assert.ok((r.usage?.prompt_tokens ?? 0) > 5);
    assert.equal(r.usage?.total_tokens, r.usage!.prompt_tokens + 12);
    const content = choice.logprobs?.content ?? [];
    assert.equal(content.length, 12);
    assert.equal(content.map((c) => c.token).join(''), choice.message.content);
    for (const c of content) {
      assert.equal(c.top_logprobs.length, 3);
      assert.equal(c.top_logprobs[0]!.logprob, c.logprob, 'greedy picks the most likely token');
      assert.ok(c.logprob <= 0);
    }
  });

  test('streamed: the same text and logprobs as non-streamed, then usage', async () => {
    const client = clientFor(server, 'acme');
    const whole = await client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 10,
      temperature: 0,
      logprobs: true,
    });
    const stream = await client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 10,
      temperature: 0,
      logprobs: true,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const logprobs: number[] = [];
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice !== undefined) {
        text += choice.delta.content ?? '';
        for (const c of choice.logprobs?.content ?? []) logprobs.push(c.logprob);
        finish = choice.finish_reason ?? finish;
      }
      usage = chunk.usage ?? usage;
    }
    assert.equal(text, whole.choices[0]!.message.content);
    assert.deepEqual(
      logprobs,
      whole.choices[0]!.logprobs!.content!.map((c) => c.logprob),
    );
    assert.equal(finish, 'length');
    assert.deepEqual(usage, whole.usage);
  });

  test("the wire carries every field the client's types require: refusal null in the message and beside logprobs", async () => {
    // openai's ChatCompletionMessage declares `refusal: string | null` and both logprobs types `{content, refusal}`,
    // required: the client passes the body through, so a missing one reads as undefined where code tests for null
    const body = { model: MODEL_ID, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 1 };
    const whole = await post(server, '/v1/chat/completions', body, 'acme');
    assert.equal(whole.status, 200);
    const choice = (
      whole.json as { choices: { message: Record<string, unknown>; logprobs: Record<string, unknown> }[] }
    ).choices[0]!;
    assert.equal(choice.message['refusal'], null, JSON.stringify(choice.message));
    assert.equal(choice.logprobs['refusal'], null, JSON.stringify(Object.keys(choice.logprobs)));
    assert.equal((choice.logprobs['content'] as unknown[]).length, 3);
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor('acme')}` },
      body: JSON.stringify({ ...body, stream: true }),
      signal: AbortSignal.timeout(60_000),
    });
    const events = (await response.text())
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)) as { choices: { logprobs: Record<string, unknown> | null }[] });
    const withLogprobs = events.flatMap((e) => e.choices).filter((c) => c.logprobs !== null);
    assert.equal(withLogprobs.length, 3);
    for (const c of withLogprobs) assert.equal(c.logprobs!['refusal'], null, JSON.stringify(Object.keys(c.logprobs!)));
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    const call = await post(
      server,
      '/v1/chat/completions',
      { model: MODEL_ID, messages, max_tokens: 8, tools, tool_choice: { type: 'function', function: { name: 'f' } } },
      'acme',
    );
    const message = (call.json as { choices: { message: Record<string, unknown> }[] }).choices[0]!.message;
    assert.ok(Array.isArray(message['tool_calls']), JSON.stringify(message));
    assert.equal(message['refusal'], null);
  });

  test('x-request-id names the request on every answer, streamed or not, and on a refusal', async () => {
    // the client reads it as `_request_id` / `withResponse().request_id` and an APIError's requestID
    const client = clientFor(server, 'acme');
    const { data, request_id } = await client.chat.completions
      .create({ model: MODEL_ID, messages, max_tokens: 2 })
      .withResponse();
    assert.equal(request_id, data.id);
    const streamed = await client.chat.completions
      .create({ model: MODEL_ID, messages, max_tokens: 2, stream: true })
      .withResponse();
    let id: string | undefined;
    for await (const chunk of streamed.data) id = chunk.id;
    assert.equal(streamed.request_id, id);
    const text = await client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 2 }).withResponse();
    assert.equal(text.request_id, text.data.id);
    const e = await expectApiError(
      () => client.completions.create({ model: MODEL_ID, prompt: [1, 2, 3], max_tokens: 254 }),
      400,
      'context_length_exceeded',
    );
    assert.match(e.requestID ?? '', /^cmpl-/);
  });

  test('stop sequences end the answer before the sequence, with finish_reason stop', async () => {
    const client = clientFor(server, 'acme');
    const whole = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 16, temperature: 0 });
    const text = whole.choices[0]!.message.content ?? '';
    const stop = text.slice(4, 7);
    assert.ok(stop.length === 3, `usable answer: ${JSON.stringify(text)}`);
    const expected = text.slice(0, text.indexOf(stop));
    const r = await client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 16,
      temperature: 0,
      stop: [stop],
    });
    assert.equal(r.choices[0]!.message.content, expected);
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    const stream = await client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 16,
      temperature: 0,
      stop,
      stream: true,
    });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';
    assert.equal(streamed, expected);
  });

  test('sampling with a seed repeats; max_completion_tokens is honoured', async () => {
    const client = clientFor(server, 'globex');
    const ask = () =>
      client.chat.completions.create({
        model: MODEL_ID,
        messages,
        max_completion_tokens: 8,
        temperature: 0.9,
        top_p: 0.9,
        seed: 1234,
      });
    const [a, b] = await Promise.all([ask(), ask()]);
    assert.equal(a.choices[0]!.message.content, b.choices[0]!.message.content);
    assert.equal(a.usage?.completion_tokens, 8);
  });
});

describe('completions', () => {
  test('non-streamed and streamed agree; legacy logprobs arrays line up', async () => {
    const client = clientFor(server, 'globex');
    const whole = await client.completions.create({
      model: MODEL_ID,
      prompt: 'The fence stood',
      max_tokens: 9,
      temperature: 0,
      logprobs: 2,
    });
    const choice = whole.choices[0]!;
    assert.equal(whole.object, 'text_completion');
    assert.equal(choice.finish_reason, 'length');
    assert.equal(whole.usage?.completion_tokens, 9);
    const lp = choice.logprobs!;
    assert.equal(lp.tokens!.length, 9);
    assert.equal(lp.tokens!.join(''), choice.text);
    assert.equal(lp.token_logprobs!.length, 9);
    assert.equal(lp.top_logprobs!.length, 9);
    assert.equal(lp.text_offset![0], 0);
    const stream = await client.completions.create({
      model: MODEL_ID,
      prompt: 'The fence stood',
      max_tokens: 9,
      temperature: 0,
      logprobs: 2,
      stream: true,
    });
    let text = '';
    const logprobs: number[] = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      logprobs.push(...(chunk.choices[0]?.logprobs?.token_logprobs ?? []));
    }
    assert.equal(text, choice.text);
    assert.deepEqual(logprobs, lp.token_logprobs);
  });

  test('text_offset is where each token starts in the text, streamed or not, with characters split over tokens', async () => {
    const client = clientFor(server, 'globex');
    // the test vocabulary's byte tokens 0xC3 (127) and 0xA9 (102): "é" takes two tokens, and the penalty alternates
    // them; the stop "éX" never matches but holds each "é" back until the next character is known
    const body = {
      model: MODEL_ID,
      prompt: 'The fence stood',
      max_tokens: 12,
      temperature: 0,
      logprobs: 0,
      logit_bias: { '127': 100, '102': 100 },
      frequency_penalty: 2,
      stop: ['éX'],
    };
    const choice = (await client.completions.create(body)).choices[0]!;
    const offsets = choice.logprobs!.text_offset!;
    assert.ok(choice.text.includes('é'), JSON.stringify(choice.text));
    assert.equal(offsets.length, 12);
    offsets.forEach((at, i) => {
      assert.ok(at >= (offsets[i - 1] ?? 0) && at <= choice.text.length, `offset ${i}: ${JSON.stringify(offsets)}`);
    });
    assert.ok(
      offsets.some((at, i) => at === offsets[i + 1]),
      'the two tokens of one character start at the same place',
    );
    const streamed: number[] = [];
    for await (const chunk of await client.completions.create({ ...body, stream: true }))
      streamed.push(...(chunk.choices[0]?.logprobs?.text_offset ?? []));
    assert.deepEqual(streamed, offsets);
  });

  test('the legacy default is 16 tokens; a prompt of token ids works', async () => {
    const client = clientFor(server, 'globex');
    const r = await client.completions.create({ model: MODEL_ID, prompt: [5, 6, 7, 8], temperature: 0 });
    assert.equal(r.usage?.prompt_tokens, 4);
    assert.equal(r.usage?.completion_tokens, 16);
  });
});

describe('tokenize and detokenize', () => {
  test('/detokenize takes at most the context in ids: decoding runs on the event loop, beside every stream', async () => {
    const ids = (n: number) => Array.from({ length: n }, (_, i) => 5 + (i % 100));
    const ok = await post(server, '/detokenize', { tokens: ids(256) }, 'acme');
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    assert.equal(typeof (ok.json as { prompt: string }).prompt, 'string');
    const over = await post(server, '/detokenize', { tokens: ids(257) }, 'acme');
    assert.equal(over.status, 400);
    assert.deepEqual((over.json as { error: { param: string; message: string } }).error.param, 'tokens');
    assert.match(
      (over.json as { error: { message: string } }).error.message,
      /257 ids, more than the 256-token context/,
    );
    // the length is what it is told first, as before the ids were read on the body thread
    const both = await post(server, '/detokenize', { tokens: [...ids(256), -1] }, 'acme');
    assert.match((both.json as { error: { message: string } }).error.message, /257 ids/);
  });

  test('a body its route refuses is a 400 that keeps the connection, like any other refusal', async () => {
    for (const [path, body] of [
      ['/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], temperature: 'hot' }],
      ['/detokenize', { tokens: 'x' }],
      ['/tokenize', { prompt: 'hi', shout: true }],
    ] as const) {
      const refused = await post(server, path, body, 'acme');
      assert.equal(refused.status, 400, path);
      assert.notEqual(refused.headers.get('connection'), 'close', path);
    }
  });
});

describe('models, health and metrics', () => {
  test('/v1/models reports the proven context', async () => {
    const models = await clientFor(server, 'acme').models.list();
    assert.deepEqual(
      models.data.map((m) => [m.id, (m as unknown as { max_model_len: number }).max_model_len]),
      [[MODEL_ID, 256]],
    );
  });

  test('/health and /metrics answer without a key; metrics use vLLM names and count per tenant', async () => {
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    const text = await adminMetrics(server);
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
      'vllm:time_to_first_token_seconds_bucket',
      'vllm:inter_token_latency_seconds_bucket',
      'kvfence_tenant_kv_pages{tenant="acme"}',
      'kvfence_isolation_incidents_total{tenant="acme"} 0',
      'kvfence_kv_pages_free',
    ]) {
      assert.ok(text.includes(name), `metrics include ${name}`);
    }
    assert.match(text, /kvfence_requests_total\{tenant="acme",outcome="completed"\} [1-9]/);
  });
});

describe('errors: OpenAI shape, right status and code', () => {
  test('400 for unsupported options, bad values, unknown fields and bad JSON', async () => {
    const client = clientFor(server, 'acme');
    const e = await expectApiError(
      () => client.chat.completions.create({ model: MODEL_ID, messages, n: 65 }),
      400,
      'invalid_request_error',
    );
    assert.equal(e.param, 'n');
    // without max_tokens, 64 answers leave each no page of its own: n's doing, said so (it was a context error
    // naming the messages, "you requested 17 tokens" of 256)
    const many = await expectApiError(
      () => client.chat.completions.create({ model: MODEL_ID, messages, n: 64 }),
      400,
      'context_length_exceeded',
    );
    assert.equal(many.param, 'n');
    assert.match(many.message, /lower n or max_tokens/);
    await expectApiError(
      () => client.chat.completions.create({ model: MODEL_ID, messages, temperature: 3 }),
      400,
      'invalid_request_error',
    );
    await expectApiError(
      () => client.chat.completions.create({ model: MODEL_ID, messages, presence_penalty: 3 }),
      400,
      'invalid_request_error',
    );
    await expectApiError(
      () => client.completions.create({ model: MODEL_ID, prompt: 'x', echo: true, logprobs: 1 }),
      400,
      'invalid_request_error',
    );
    await expectApiError(
      () => client.chat.completions.create({ model: MODEL_ID, messages: [] }),
      400,
      'invalid_request_error',
    );
    const raw = await post(server, '/v1/chat/completions', { model: MODEL_ID, messages, frobnicate: 1 }, 'acme');
    assert.equal(raw.status, 400);
    const badJson = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor('acme')}` },
      body: '{"model":',
    });
    assert.equal(badJson.status, 400);
    assert.equal(((await badJson.json()) as { error: { code: string } }).error.code, 'invalid_request_error');
  });

  test('400 context_length_exceeded before any work', async () => {
    const client = clientFor(server, 'acme');
    const e = await expectApiError(
      () => client.completions.create({ model: MODEL_ID, prompt: [1, 2, 3], max_tokens: 254 }),
      400,
      'context_length_exceeded',
    );
    assert.match(e.message, /maximum context length is 256 tokens/);
    await expectApiError(
      () =>
        client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'word '.repeat(300) }] }),
      400,
      'context_length_exceeded',
    );
  });

  test('401 for a missing or wrong key', async () => {
    const wrong = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-a-key-0123456789', maxRetries: 0 });
    await expectApiError(() => wrong.chat.completions.create({ model: MODEL_ID, messages }), 401, 'invalid_api_key');
    await expectApiError(() => wrong.models.list(), 401, 'invalid_api_key');
  });

  test('404 for an unknown model or route', async () => {
    const client = clientFor(server, 'acme');
    await expectApiError(() => client.chat.completions.create({ model: 'gpt-9', messages }), 404, 'model_not_found');
    const r = await fetch(`${server.url}/v1/embeddings`, { method: 'POST' });
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'not_found');
  });

  test('a refusal quotes at most 64 characters of a client string: a huge field name or model id is not echoed', async () => {
    // each refusal wrote a 15 MB key into the log and the reply (the log grew 1.5 GB in 45 s; I11 review)
    const huge = 'k'.repeat(1 << 20);
    const cases: [Record<string, unknown>, number, string][] = [
      [{ model: MODEL_ID, prompt: 'hi', [huge]: 1 }, 400, 'invalid_request_error'],
      [{ model: huge, prompt: 'hi' }, 404, 'model_not_found'],
      [{ model: MODEL_ID, prompt: 'hi', logit_bias: { [huge]: 1 } }, 400, 'invalid_request_error'],
    ];
    for (const [body, status, code] of cases) {
      const r = await post(server, '/v1/completions', body, 'acme');
      const error = (r.json as { error: { message: string; param: string | null; code: string } }).error;
      assert.deepEqual([r.status, error.code], [status, code]);
      assert.ok(error.message.length < 300, `a message of ${error.message.length} characters`);
      assert.ok((error.param ?? '').length < 100, `a param of ${error.param?.length} characters`);
      assert.match(error.message, /…\(1048576 characters\)/);
    }
    const tools = [{ type: 'function', function: { name: 'f' } }];
    const named = { type: 'function', function: { name: huge } };
    const r = await post(
      server,
      '/v1/chat/completions',
      {
        model: MODEL_ID,
        messages,
        tools,
        tool_choice: named,
      },
      'acme',
    );
    const error = (r.json as { error: { message: string } }).error;
    assert.equal(r.status, 400);
    assert.ok(error.message.length < 300, `a message of ${error.message.length} characters`);
  });

  test('429 over the tenant concurrency limit, without touching other tenants', async () => {
    const solo = clientFor(server, 'solo');
    server.worker.pause(); // the first request stays in flight until resumed
    const first = solo.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 4 });
    await waitFor(() => server.worker.stats().tenants.get('solo')?.requests === 1, 'the first request in flight');
    const e = await expectApiError(
      () => solo.completions.create({ model: MODEL_ID, prompt: 'y', max_tokens: 2 }),
      429,
      'rate_limit_exceeded',
    );
    assert.equal(e.headers?.get('retry-after'), '1');
    server.worker.resume();
    const other = await clientFor(server, 'acme').completions.create({ model: MODEL_ID, prompt: 'y', max_tokens: 2 });
    assert.equal(other.choices[0]!.finish_reason, 'length');
    assert.equal((await first).usage?.completion_tokens, 4);
    assertPoolWhole(server);
  });
});

describe('errors when the server is full', () => {
  let small: RunningServer;
  let clockMs = 0;
  before(async () => {
    small = await startTestServer({
      runningMax: 1,
      waitingMax: 1,
      queueTimeoutMs: 1000,
      stepTokens: 64,
      now: () => clockMs,
    });
  });
  after(async () => {
    await small?.close();
  });

  test('503 with Retry-After when the queue is full, and when the wait runs out', async () => {
    small.worker.pause(); // nothing is admitted: the queue fills deterministically
    const waiting = post(small, '/v1/completions', { model: MODEL_ID, prompt: 'a', max_tokens: 2 }); // waits, then times out
    await waitFor(() => small.worker.stats().waiting === 1, 'a waiting request');
    const full = await post(small, '/v1/completions', { model: MODEL_ID, prompt: 'b', max_tokens: 2 });
    assert.equal(full.status, 503);
    assert.equal((full.json as { error: { code: string } }).error.code, 'server_overloaded');
    assert.equal(full.headers.get('retry-after'), '1');
    clockMs += 1000; // the waiting request's deadline passes
    small.worker.resume();
    const timedOut = await waiting;
    assert.equal(timedOut.status, 503);
    assert.equal(timedOut.headers.get('retry-after'), '1');
    assert.match((timedOut.json as { error: { message: string } }).error.message, /within \d+ ms/);
    assert.equal(small.worker.pool.reservationCount, 0, 'neither request touched a page');
    assertPoolWhole(small);
    const ok = await post(small, '/v1/completions', { model: MODEL_ID, prompt: 'c', max_tokens: 2 });
    assert.equal(ok.status, 200);
  });
});
