/**
 * The gateway fuzzed over HTTP (fastify's in-process injection, the real routes, hooks and engine): request bodies
 * built from the API's own fields with values of every JSON type, raw bodies, odd content types and keys. Every
 * answer must be below 500 and, when the API's route answers an error, the API's error object; afterwards nothing may be left running,
 * every page is free and no isolation incident was recorded.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { assertPoolWhole, keyFor, startTestServer, waitFor, writeKeyFile } from '../serving/serve-helpers.js';
import type { FuzzTarget } from './fuzz-target.js';

interface HttpInput {
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  payload: string | undefined;
}

const json: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { maxDepth: 3 },
    fc.constant(null),
    fc.boolean(),
    fc.integer({ min: -5, max: 300 }),
    fc.integer(),
    fc.double(),
    fc.string({ maxLength: 24 }),
    fc.array(tie('v'), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 8 }), tie('v'), { maxKeys: 3 }),
  ),
})).v;

const small = fc.oneof(fc.integer({ min: -1, max: 8 }), json);
const text = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 20 }), json);
const message = fc.record(
  {
    role: fc.oneof(fc.constantFrom('system', 'user', 'assistant', 'tool', 'developer'), json),
    content: fc.oneof(
      text,
      fc.array(fc.record({ type: fc.constantFrom('text', 'image_url'), text }), { maxLength: 2 }),
    ),
    name: text,
    tool_calls: json,
    tool_call_id: text,
  },
  { requiredKeys: ['role', 'content'] },
);
const schema = fc.oneof(
  json,
  fc.record({
    type: fc.constantFrom('json_object', 'json_schema', 'text'),
    json_schema: fc.record({ name: text, schema: json, strict: fc.boolean() }, { requiredKeys: [] }),
  }),
);
const tool = fc.record({
  type: fc.oneof(fc.constant('function'), json),
  function: fc.record({ name: fc.oneof(fc.constantFrom('get', 'f_1'), text), parameters: json }, { requiredKeys: [] }),
});

/** Bodies made of the API's fields: mostly plausible values, any JSON value some of the time, unknown fields too. */
const body = fc
  .tuple(
    fc.record(
      {
        model: fc.oneof({ weight: 5, arbitrary: fc.constant('tiny-test') }, json),
        prompt: fc.oneof(text, fc.array(fc.integer({ min: -2, max: 600 }), { maxLength: 12 }), fc.array(text)),
        messages: fc.oneof(fc.array(message, { maxLength: 3 }), json),
        max_tokens: small,
        max_completion_tokens: small,
        temperature: fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), json),
        top_p: json,
        top_k: json,
        min_p: json,
        n: small,
        seed: json,
        stream: fc.oneof(fc.boolean(), json),
        stream_options: json,
        logprobs: fc.oneof(fc.boolean(), small),
        top_logprobs: small,
        echo: fc.oneof(fc.boolean(), json),
        stop: fc.oneof(text, fc.array(text, { maxLength: 5 })),
        logit_bias: json,
        frequency_penalty: json,
        presence_penalty: json,
        repetition_penalty: json,
        response_format: schema,
        tools: fc.oneof(fc.array(tool, { maxLength: 2 }), json),
        tool_choice: json,
        ignore_eos: json,
        min_tokens: small,
        stop_token_ids: json,
        tokens: json,
        add_special_tokens: json,
        user: text,
      },
      { requiredKeys: [] },
    ),
    fc.dictionary(fc.string({ maxLength: 12 }), json, { maxKeys: 2 }),
  )
  .map(([known, unknown]) => ({ ...unknown, ...known }));

const ROUTES: readonly (readonly ['GET' | 'POST', string])[] = [
  ['POST', '/v1/completions'],
  ['POST', '/v1/chat/completions'],
  ['POST', '/tokenize'],
  ['POST', '/detokenize'],
  ['GET', '/v1/models'],
  ['GET', '/health'],
  ['GET', '/metrics'],
];

const input: fc.Arbitrary<HttpInput> = fc
  .record({
    route: fc.oneof(
      { weight: 9, arbitrary: fc.constantFrom(...ROUTES) },
      fc
        .tuple(fc.constantFrom<'GET' | 'POST'>('GET', 'POST'), fc.string({ maxLength: 20 }))
        // escaped: the injector itself refuses request lines a socket could still carry
        .map(([method, path]): readonly ['GET' | 'POST', string] => [method, `/${encodeURIComponent(path)}`]),
    ),
    body,
    raw: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, fc.string({ maxLength: 64 })),
    cut: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, fc.nat()),
    contentType: fc.oneof(
      { weight: 8, arbitrary: fc.constant('application/json') },
      fc.constantFrom('text/plain', 'application/json; charset=utf-8', 'application/x-www-form-urlencoded', ''),
    ),
    auth: fc.oneof(
      { weight: 8, arbitrary: fc.constant(`Bearer ${keyFor('fuzz')}`) },
      fc.constantFrom('', 'Bearer', 'Bearer wrong-key', `bearer ${keyFor('fuzz')}`),
      fc.string({ maxLength: 30 }),
    ),
  })
  .map(({ route: [method, url], body: b, raw, cut, contentType, auth }) => {
    const whole = raw ?? JSON.stringify(b);
    const payload = method === 'GET' ? undefined : cut === undefined ? whole : whole.slice(0, cut % (whole.length + 1));
    const headers: Record<string, string> = { authorization: auth };
    if (payload !== undefined && contentType !== '') headers['content-type'] = contentType;
    return { method, url, headers, payload };
  });

export const httpTarget: FuzzTarget<HttpInput> = {
  name: 'http',
  ciRuns: 400,
  async open() {
    const server: RunningServer = await startTestServer({ apiKeysPath: writeKeyFile(['fuzz']) });
    return {
      input,
      async check(request) {
        const response = await server.gateway.app.inject({
          method: request.method,
          url: request.url,
          headers: request.headers,
          ...(request.payload !== undefined ? { payload: request.payload } : {}),
        });
        const what = `${request.method} ${request.url} → ${response.statusCode} ${response.body.slice(0, 300)}`;
        assert.ok(response.statusCode < 500, what);
        // the API's routes answer errors as the API's error object (unknown paths get the framework's 404/400)
        if (response.statusCode >= 400 && ROUTES.some(([m, url]) => m === request.method && url === request.url)) {
          const error = (JSON.parse(response.body) as { error?: { message?: unknown; code?: unknown } }).error;
          assert.ok(typeof error?.message === 'string' && error.message !== '', what);
        }
      },
      async close() {
        try {
          const idle = () => server.worker.stats().running === 0 && server.worker.stats().waiting === 0;
          await waitFor(idle, 'the fuzzed server to be idle');
          assertPoolWhole(server);
          assert.equal(server.incidents.list().length, 0, 'no isolation incident');
        } finally {
          await server.close();
        }
      },
    };
  },
};
