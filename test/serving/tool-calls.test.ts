// Tool calling over HTTP with the official client, on a model whose chat template renders tools (Hermes style):
// forced calls (named, required) always parse and validate against the function's parameters, streamed and not; tools
// and the tool-call history reach the prompt through the template; errors are 400s naming the field.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Ajv } from 'ajv';
import type OpenAI from 'openai';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { assertPoolWhole, clientFor, MODEL_ID, post, startTestServer, writeKeyFile } from './serve-helpers.js';
import { toolModelFile } from './tool-model.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({ modelPath: toolModelFile(), apiKeysPath: writeKeyFile(['acme']) });
});
after(async () => {
  await server?.close();
});

const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const ADD = {
  type: 'object',
  properties: { a: { type: 'integer' }, b: { type: 'integer' } },
  required: ['a', 'b'],
  additionalProperties: false,
};
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: WEATHER } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers', parameters: ADD } },
];
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'What is the weather in Oslo?' }];
const ajv = new Ajv({ strict: false });
const validators = { get_weather: ajv.compile(WEATHER), add: ajv.compile(ADD) };

function assertCall(call: OpenAI.ChatCompletionMessageFunctionToolCall | undefined, name?: string): void {
  assert.ok(call !== undefined && call.type === 'function');
  if (name !== undefined) assert.equal(call.function.name, name);
  const validate = validators[call.function.name as keyof typeof validators];
  assert.ok(validate(JSON.parse(call.function.arguments)), call.function.arguments);
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
}

describe('tool calls', () => {
  test('named: the output is the arguments, valid for the parameters; streamed deltas rebuild the same call', async () => {
    const client = clientFor(server, 'acme');
    const body = {
      model: MODEL_ID,
      messages,
      tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 60,
      temperature: 0,
    } as const;
    const r = await client.chat.completions.create(body);
    const choice = r.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls?.length, 1);
    assertCall(choice.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall, 'get_weather');
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let args = '';
    let name = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      for (const call of c?.delta.tool_calls ?? []) {
        name += call.function?.name ?? '';
        args += call.function?.arguments ?? '';
      }
      finish = c?.finish_reason ?? finish;
    }
    const whole = choice.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([name, args, finish], ['get_weather', whole.function.arguments, 'tool_calls']);
  });

  test('required: one or more calls of the given tools, each valid; parallel_tool_calls false allows one', async () => {
    const client = clientFor(server, 'acme');
    for (const [seed, parallel] of [
      [1, true],
      [2, true],
      [3, false],
    ] as const) {
      const r = await client.chat.completions.create({
        model: MODEL_ID,
        messages,
        tools,
        tool_choice: 'required',
        parallel_tool_calls: parallel,
        max_tokens: 120,
        temperature: 1,
        seed,
      });
      const calls = r.choices[0]!.message.tool_calls ?? [];
      assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
      assert.ok(calls.length >= 1 && (parallel || calls.length === 1));
      for (const call of calls) assertCall(call as OpenAI.ChatCompletionMessageFunctionToolCall);
    }
    assertPoolWhole(server);
  });

  test('tools and the call history reach the prompt through the template; a second turn answers', async () => {
    const history: OpenAI.ChatCompletionMessageParam[] = [
      ...messages,
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_7',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Oslo","unit":"c"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_7', content: '12 degrees' },
    ];
    const rendered = await post(server, '/tokenize', { messages: history, tools, return_token_strs: true }, 'acme');
    assert.equal(rendered.status, 200);
    const text = (rendered.json as { token_strs: string[] }).token_strs.join('');
    assert.ok(text.includes('"name": "get_weather", "description": "Weather in a city"'), text);
    assert.ok(
      text.includes('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}</tool_call>'),
    );
    assert.ok(text.includes('<tool_response>12 degrees</tool_response>'));
    const r = await clientFor(server, 'acme').chat.completions.create({
      model: MODEL_ID,
      messages: history,
      tools,
      max_tokens: 8,
      temperature: 0,
    });
    assert.equal(r.usage?.prompt_tokens, (rendered.json as { count: number }).count);
    assert.equal(typeof r.choices[0]!.message.content, 'string');
  });

  test('400s: unknown named tool, unsupported parameter keywords, deprecated functions, tools with response_format', async () => {
    const client = clientFor(server, 'acme');
    const refused = async (body: Record<string, unknown>, param: string, match: RegExp) => {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 5, ...body }),
        (e: { status?: number; param?: string; message?: string }) =>
          e.status === 400 && e.param === param && match.test(e.message ?? ''),
        JSON.stringify(body),
      );
    };
    await refused({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /nope/);
    const patterned = [
      {
        type: 'function',
        function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'x' } } } },
      },
    ];
    await refused({ tools: patterned, tool_choice: 'required' }, 'tools[0].function.parameters', /'pattern'/);
    // a forced call's arguments are an object: a root that allows null would end the answer as text, not a call
    const nullable = [{ type: 'function', function: { name: 'f', parameters: { type: ['object', 'null'] } } }];
    await refused({ tools: nullable, tool_choice: 'required' }, 'tools[0].function.parameters', /an object schema/);
    await refused(
      { response_format: { type: 'json_object' }, stop_token_ids: [5] },
      'stop_token_ids',
      /cannot be combined with response_format/,
    );
    await refused({ functions: [{ name: 'f' }] }, 'functions', /deprecated/);
    await refused({ tools, response_format: { type: 'json_object' } }, 'response_format', /tool_choice is none/);
    await refused({ tool_choice: 'required' }, 'tool_choice', /needs tools/);
  });
});
