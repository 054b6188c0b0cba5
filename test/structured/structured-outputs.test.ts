// Structured outputs on a live colocated server with the random-weight model: every schema of the suite gives a
// document that parses and validates (ajv), greedy and sampled, alone and 16 at once (bit-identical, I7); a max_tokens
// cut reports `length`; unsupported keywords are a 400 naming them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { assertPoolWhole, clientFor, MODEL_ID, post, startTestServer, writeKeyFile } from '../serving/serve-helpers.js';
import { SCHEMAS } from './schemas.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({ apiKeysPath: writeKeyFile(['acme']) });
});
after(async () => {
  await server?.close();
});

const ajv = new Ajv({ strict: false });
const messages = [{ role: 'user' as const, content: 'Answer in JSON.' }];

interface Answer {
  content: string;
  finish: string;
  logprobs: number[];
}

async function ask(schemaIndex: number, sampled: boolean, maxTokens = 200): Promise<Answer> {
  const { name, schema } = SCHEMAS[schemaIndex]!;
  const r = await clientFor(server, 'acme').chat.completions.create({
    model: MODEL_ID,
    messages,
    max_tokens: maxTokens,
    response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
    logprobs: true,
    ...(sampled ? { temperature: 1, seed: 1000 + schemaIndex } : { temperature: 0 }),
  });
  const choice = r.choices[0]!;
  return {
    content: choice.message.content ?? '',
    finish: choice.finish_reason,
    logprobs: (choice.logprobs?.content ?? []).map((c) => c.logprob),
  };
}

function assertValid(schemaIndex: number, answer: Answer): void {
  const { name, schema } = SCHEMAS[schemaIndex]!;
  assert.equal(answer.finish, 'stop', `${name}: the document ended (${answer.content})`);
  const value: unknown = JSON.parse(answer.content);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${name}: ${answer.content} — ${ajv.errorsText(validate.errors)}`);
}

describe('json_schema response formats', () => {
  const alone = new Map<string, Answer>();

  test(`all ${SCHEMAS.length} schemas, greedy and sampled, alone: every answer parses and validates`, async () => {
    assert.ok(SCHEMAS.length >= 30);
    for (let i = 0; i < SCHEMAS.length; i++) {
      for (const sampled of [false, true]) {
        const answer = await ask(i, sampled);
        assertValid(i, answer);
        alone.set(`${i}:${sampled}`, answer);
      }
    }
  });

  test('16 at once, twice over (greedy and sampled): the same bits as alone', async () => {
    for (let batch = 0; batch < SCHEMAS.length; batch += 16) {
      const jobs = SCHEMAS.slice(batch, batch + 16).flatMap((_, j) => [
        { i: batch + j, sampled: false },
        { i: batch + j, sampled: true },
      ]);
      for (let at = 0; at < jobs.length; at += 16) {
        const group = jobs.slice(at, at + 16);
        const answers = await Promise.all(group.map((job) => ask(job.i, job.sampled)));
        group.forEach((job, k) => {
          assertValid(job.i, answers[k]!);
          assert.deepEqual(answers[k], alone.get(`${job.i}:${job.sampled}`), `${SCHEMAS[job.i]!.name} under load`);
        });
      }
    }
    await assertPoolWhole(server);
  });

  test('a document cut by max_tokens ends with length, never a silent stop', async () => {
    const answer = await ask(
      SCHEMAS.findIndex((s) => s.name === 'event'),
      false,
      3,
    );
    assert.equal(answer.finish, 'length');
    assert.throws(() => JSON.parse(answer.content));
  });

  test('json_object gives an object whenever it ends by itself; the cut is reported', async () => {
    // free-form strings of a random model rarely close: favour the quote and the brace (ids from /tokenize)
    const ids = await post(server, '/tokenize', { prompt: '"}', add_special_tokens: false }, 'acme');
    const [quote, brace] = (ids.json as { tokens: number[] }).tokens;
    let ended = 0;
    for (let seed = 0; seed < 6; seed++) {
      const r = await clientFor(server, 'acme').chat.completions.create({
        model: MODEL_ID,
        messages,
        max_tokens: 200,
        temperature: 1,
        seed,
        logit_bias: { [String(quote)]: 6, [String(brace)]: 6 },
        response_format: { type: 'json_object' },
      });
      const choice = r.choices[0]!;
      if (choice.finish_reason === 'length') continue;
      ended++;
      const value: unknown = JSON.parse(choice.message.content ?? '');
      assert.ok(typeof value === 'object' && value !== null && !Array.isArray(value));
    }
    assert.ok(ended > 0, 'some object ends within 200 tokens');
  });

  test('unsupported keywords are a 400 naming them; stop sequences cannot cut a document', async () => {
    const client = clientFor(server, 'acme');
    const refused = async (body: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming>, match: RegExp) => {
      try {
        await client.chat.completions.create({ model: MODEL_ID, messages, ...body });
      } catch (error) {
        assert.ok(error instanceof OpenAI.APIError && error.status === 400, String(error));
        assert.match(error.message, match);
        return;
      }
      assert.fail('expected a 400');
    };
    const format = (schema: Record<string, unknown>) =>
      ({ type: 'json_schema', json_schema: { name: 'x', schema } }) as const;
    await refused({ response_format: format({ type: 'string', pattern: 'a+' }) }, /'pattern' is not supported/);
    await refused({ response_format: format({ oneOf: [{ type: 'string' }] }) }, /'oneOf' is not supported/);
    await refused(
      { response_format: format({ type: 'object', properties: { n: { type: 'number', minimum: 1 } } }) },
      /'minimum' is not supported .*#\/properties\/n/,
    );
    await refused({ response_format: format({ type: 'string' }), stop: ['}'] }, /stop sequences cannot/);
  });
});
