// Real client libraries, unchanged, against a live server (the random-weight model, so answers are noise — but noise
// that always has the requested shape): the official `openai` client's chat.completions.parse with a zod schema; the
// Vercel AI SDK's generateObject / streamObject with zod, and generateText with a tool (a call, then a second turn
// with the tool's result); LangChain's withStructuredOutput and bindTools. Only loopback is reachable from here: any
// other fetch a library attempts fails the test.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, stepCountIs, streamObject, tool } from 'ai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { clientFor, keyFor, MODEL_ID, startTestServer, writeKeyFile } from '../serving/serve-helpers.js';
import { toolModelFile } from '../serving/tool-model.js';

let server: RunningServer;
const realFetch = globalThis.fetch;
before(async () => {
  server = await startTestServer({ modelPath: toolModelFile(), apiKeysPath: writeKeyFile(['acme']) });
  globalThis.fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.hostname !== '127.0.0.1') return Promise.reject(new Error(`a client tried to reach ${url.origin}`));
    return realFetch(input, init);
  };
});
after(async () => {
  globalThis.fetch = realFetch;
  await server?.close();
});

const Person = z.object({
  name: z.string().max(8),
  age: z.number().int(),
  tags: z.array(z.enum(['red', 'green'])).max(2),
  nickname: z.string().max(5).nullable(),
});

const weatherTool = {
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string().max(8), unit: z.enum(['c', 'f']) }),
};

describe('the openai client', () => {
  test('chat.completions.parse with a zod schema returns a parsed, valid object', async () => {
    const r = await clientFor(server, 'acme').chat.completions.parse({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'Describe a person.' }],
      response_format: zodResponseFormat(Person, 'person'),
      max_tokens: 120,
      temperature: 0,
    });
    const parsed = r.choices[0]!.message.parsed;
    assert.ok(parsed !== null);
    assert.deepEqual(Person.parse(parsed), parsed);
  });
});

describe('the Vercel AI SDK (openai-compatible provider)', () => {
  const model = () =>
    createOpenAICompatible({
      name: 'kvfence',
      baseURL: `${server.url}/v1`,
      apiKey: keyFor('acme'),
      supportsStructuredOutputs: true,
    }).chatModel(MODEL_ID);

  test('generateObject and streamObject with a zod schema', async () => {
    const { object, finishReason } = await generateObject({
      model: model(),
      schema: Person,
      prompt: 'Describe a person.',
      temperature: 0,
      maxOutputTokens: 120,
    });
    assert.equal(finishReason, 'stop');
    assert.deepEqual(Person.parse(object), object);
    const stream = streamObject({
      model: model(),
      schema: Person,
      prompt: 'Another one.',
      temperature: 1,
      seed: 3,
      maxOutputTokens: 120,
    });
    let partials = 0;
    for await (const _ of stream.partialObjectStream) partials++;
    const streamed = await stream.object;
    assert.deepEqual(Person.parse(streamed), streamed);
    assert.ok(partials > 1, 'the object arrived piece by piece');
  });

  test('generateText with a tool: a call comes back, the tool runs, a second turn answers with its result', async () => {
    const calls: unknown[] = [];
    const result = await generateText({
      model: model(),
      tools: {
        weather: tool({
          ...weatherTool,
          execute: async (input) => {
            calls.push(input);
            return { degrees: 12 };
          },
        }),
      },
      prepareStep: ({ stepNumber }) => ({
        toolChoice: stepNumber === 0 ? { type: 'tool', toolName: 'weather' } : 'none',
      }),
      stopWhen: stepCountIs(2),
      prompt: 'What is the weather in Oslo?',
      temperature: 0,
      maxOutputTokens: 40,
    });
    assert.equal(result.steps.length, 2);
    const [first, second] = result.steps;
    assert.equal(first!.toolCalls.length, 1);
    assert.equal(first!.toolCalls[0]!.toolName, 'weather');
    assert.deepEqual(calls, [weatherTool.inputSchema.parse(first!.toolCalls[0]!.input)]);
    assert.deepEqual(
      first!.toolResults.map((r) => r.output),
      [{ degrees: 12 }],
    );
    assert.equal(second!.toolCalls.length, 0);
    assert.equal(typeof second!.text, 'string');
  });
});

describe('LangChain (ChatOpenAI)', () => {
  const chat = () =>
    new ChatOpenAI({
      model: MODEL_ID,
      apiKey: keyFor('acme'),
      configuration: { baseURL: `${server.url}/v1` },
      temperature: 0,
      maxTokens: 120,
      maxRetries: 0,
    });

  test('withStructuredOutput with a zod schema', async () => {
    const structured = chat().withStructuredOutput(Person, { name: 'person' });
    const person = await structured.invoke('Describe a person.');
    assert.deepEqual(Person.parse(person), person);
  });

  test('bindTools: the model calls the bound tool with valid arguments', async () => {
    const bound = chat().bindTools(
      [{ name: 'weather', description: weatherTool.description, schema: weatherTool.inputSchema }],
      {
        tool_choice: 'weather',
      },
    );
    const message = await bound.invoke('What is the weather in Oslo?');
    assert.equal(message.tool_calls?.length, 1);
    const call = message.tool_calls![0]!;
    assert.equal(call.name, 'weather');
    assert.deepEqual(weatherTool.inputSchema.parse(call.args), call.args);
  });
});
