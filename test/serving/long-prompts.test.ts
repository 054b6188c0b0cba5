// Long prompts cost a bounded, small amount and never freeze the event loop (DESIGN I11): a text longer than the
// context can hold is a fast 400 before tokenizing; one over the context in tokens stops tokenizing at the context;
// long texts are tokenized on a thread while the event loop keeps serving; a one-letter prompt of any length is a 400,
// not a crash.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chatPromptTokens } from '../../src/gateway/prompt-length.js';
import { tokenPiece } from '../../src/gateway/text-stream.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { type ChatMessage, parseChatTemplate } from '../../src/model/chat-template.js';
import { EncoderThread, QUICK_CHARS } from '../../src/model/encoder-thread.js';
import { writeGguf } from '../../src/model/gguf-write.js';
import { loadModelHead } from '../../src/model/load-model.js';
import { makeTestModel } from '../../src/model/test-model.js';
import type { EncodeOptions } from '../../src/model/tokenizer.js';
import { SCHEMA_PARAM } from '../../src/structured/grammar-cache.js';
import { whileTicking } from '../helpers/event-loop-ticks.js';
import { loadTestModel } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { post, SERVING_MODEL, startTestServer } from './serve-helpers.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer();
});
after(async () => {
  await server?.close();
});

const CONTEXT = 256;
/** one word of 10 million letters: seconds on the long prompts' thread */
const COSTLY = 'ab'.repeat(5_000_000);

/** the thread's ids for `text`, however many */
const encode = (thread: EncoderThread, text: string, options: EncodeOptions, tenant: string) =>
  thread.encodeUpTo(text, Number.POSITIVE_INFINITY, options, tenant);

async function refused(body: Record<string, unknown>, path = '/v1/completions') {
  const started = performance.now();
  const r = await post(server, path, { model: 'tiny-test', max_tokens: 4, ...body });
  return { ...r, ms: performance.now() - started, error: (r.json as { error: { code: string; param: string } }).error };
}

test('a prompt longer than the context can hold is a fast 400, whatever its letters', async () => {
  for (const text of ['a'.repeat(256 * 1024), 'The quick brown fox. '.repeat(40_000)]) {
    const r = await refused({ prompt: text });
    assert.equal(r.status, 400);
    assert.equal(r.error.code, 'context_length_exceeded');
    assert.equal(r.error.param, 'prompt');
    assert.ok(r.ms < 2_000, `answered in ${r.ms.toFixed(0)} ms`);
  }
  const chat = await refused({ messages: [{ role: 'user', content: 'b'.repeat(256 * 1024) }] }, '/v1/chat/completions');
  assert.deepEqual([chat.status, chat.error.code, chat.error.param], [400, 'context_length_exceeded', 'messages']);
});

test('a prompt within the character bound but over the context in tokens is a 400 naming the context', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const words = 'one two three four five six seven eight nine ten ';
  const text = words.repeat(40); // 2000 characters, ~1000 tokens here: far over 256
  assert.ok(text.length <= CONTEXT * model.tokenizer.longestTokenChars, 'inside the character bound');
  const r = await refused({ prompt: text });
  assert.equal(r.status, 400);
  assert.match(JSON.stringify(r.json), /more than 256 tokens long/);
  const fits = await post(server, '/v1/completions', { model: 'tiny-test', prompt: words.repeat(4), max_tokens: 2 });
  assert.equal(fits.status, 200, 'a prompt that fits is answered');
});

test('the tokenizer thread: the same ids as inline, while the event loop keeps running', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    const text = 'tokens and more tokens, 12345 of them\n'.repeat(20_000); // 760k characters
    const { value: ids, ticks, ms } = await whileTicking(() => encode(thread, text, { addSpecial: true }, 't'));
    assert.deepEqual(ids, model.tokenizer.encode(text, { addSpecial: true }));
    // inline, the loop would not tick once while encoding; here it ticks most milliseconds
    assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms of tokenizing`);
    // short texts are encoded inline, the same way
    assert.deepEqual(await encode(thread, 'short', {}, 't'), model.tokenizer.encode('short', {}));
  } finally {
    await thread.close();
  }
});

test('many ids are decoded, and their pieces written, on the tokenizer threads: the same as inline, the loop running', async () => {
  // 131,072 ids of Llama 3's vocabulary held the event loop 130–200 ms in /detokenize and 300–340 ms for /tokenize's
  // token_strs
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    for (const count of [100, 10_000, 200_000]) {
      const ids = Array.from({ length: count }, (_, i) => (i * 7919) % model.tokenizer.vocabSize);
      const decoded = await whileTicking(() => thread.decode(ids, 't'));
      assert.equal(decoded.value, model.tokenizer.decode(ids));
      const pieces = await whileTicking(() => thread.pieceTexts(ids, 't'));
      assert.deepEqual(
        pieces.value,
        ids.map((id) => tokenPiece(model.tokenizer, id).text),
      );
      if (count > 100_000)
        for (const { ticks, ms } of [decoded, pieces])
          assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms`);
    }
  } finally {
    await thread.close();
  }
});

test('a schema whose grammar is costly is checked on the thread, the loop running; a real one inline', async () => {
  // 64 forced tools of 150 optional properties each cost the event loop ~1.9 s a request; one connection sending them
  // took every tenant's first token from ~20 ms to ~4 s
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  const object = (n: number) => ({
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])),
  });
  const check = (schema: object, param: string) => ({ constraint: { kind: 'json_schema' as const, schema }, param });
  try {
    const costly = [check(object(80), 'tools'), check(object(80), 'tools[0].function.parameters')];
    const { ticks, ms } = await whileTicking(() => thread.checkGrammars(costly, 't'));
    assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms of building`);
    // a bad one is the same 400 as inline, naming the field the thread found at fault
    const bad = [check(object(1), 'tools'), check({ type: 'string', format: 'email' }, 'tools[0].function.parameters')];
    bad[0]!.constraint.schema = { anyOf: [object(1), { type: 'string', format: 'email' }] };
    await assert.rejects(thread.checkGrammars(bad, 't'), (e: unknown) => {
      const error = e as { code: string; param: string };
      return error.code === 'invalid_request_error' && error.param === 'tools[0].function.parameters';
    });
    // a real one never goes to the thread: a closed thread would refuse it
    await thread.close();
    await thread.checkGrammars([check(object(5), SCHEMA_PARAM)], 't');
  } finally {
    await thread.close();
  }
});

test('a long conversation renders through the chat template on the thread: the same ids, the loop running', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const template = parseChatTemplate(model.chatTemplate!);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    // thousands of one-letter messages: rendered on the event loop, 25–50 ms a request before any tenant limit
    const messages = Array.from(
      { length: 3000 },
      (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'a' }) as const,
    );
    const call = { messages: [...messages], tools: undefined, context: 1 << 20 };
    const { value: ids, ticks, ms } = await whileTicking(() => thread.encodeChat(call, 't'));
    assert.deepEqual(ids, chatPromptTokens(template, model.tokenizer, call, Number.POSITIVE_INFINITY));
    assert.ok(ticks >= ms / 10, `${ticks} ticks in ${ms.toFixed(0)} ms of rendering`);
    // a refusal from the thread keeps its code and the field at fault
    await assert.rejects(
      thread.encodeChat({ ...call, context: CONTEXT }, 't'),
      (e: { code?: string; param?: string }) => {
        return e.code === 'context_length_exceeded' && e.param === 'messages';
      },
    );
  } finally {
    await thread.close();
  }
  const r = await refused({ messages: messages3000() }, '/v1/chat/completions');
  assert.deepEqual([r.status, r.error.code, r.error.param], [400, 'context_length_exceeded', 'messages']);
});

const messages3000 = () =>
  Array.from({ length: 3000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'a' }));

test('the tokenizer thread is bounded: a slow text times out with a 503 code, a full queue refuses at once', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const slow = new EncoderThread(model.tokenizer, model.path, 1);
  const queued = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    await assert.rejects(
      encode(slow, 'x y z '.repeat(200_000), {}, 't'),
      (e: { code?: string; message?: string }) => e.code === 'server_overloaded' && /longer than 1 ms/.test(e.message!),
    );
    const text = 'a b c d '.repeat(500); // past the inline bound, a few ms each
    const expected = model.tokenizer.encode(text, {});
    // 80 tenants, one text each: the thread's own bound
    const answers = await Promise.all(
      Array.from({ length: 80 }, (_, i) => encode(queued, text, {}, `t${i}`).catch((e: { code?: string }) => e.code)),
    );
    const refusedAtOnce = answers.filter((a) => a === 'server_overloaded');
    assert.equal(refusedAtOnce.length, 80 - 64, 'the queue holds 64');
    for (const a of answers) if (typeof a !== 'string') assert.deepEqual(a, expected);
  } finally {
    await Promise.all([slow.close(), queued.close()]);
  }
});

test('a prompt refused for its time while waiting leaves the queue unrun', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 1);
  try {
    // the first keeps the long prompts' thread busy for a while; the other 63 wait behind it. All 64 are refused for
    // their time
    const long = 'x y z '.repeat(200_000);
    const texts = [long, ...Array.from({ length: 63 }, () => 'a b c d '.repeat(QUICK_CHARS / 8 + 1))];
    const codes = await Promise.all(
      texts.map((text, i) => encode(thread, text, {}, `t${i}`).catch((e: { code?: string }) => e.code)),
    );
    assert.deepEqual(new Set(codes), new Set(['server_overloaded']));
    // the 63 left unrun, so the queue has room: a new prompt is taken (and refused for its own time), where a queue
    // still holding them would refuse it at once
    await assert.rejects(encode(thread, long, {}, 'late'), /took longer than 1 ms/);
  } finally {
    await thread.close();
  }
});

test('a prompt refused for its time on the thread is dropped there: the next is answered at once', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 1_000);
  try {
    // one word of 10 million letters: seconds of merging. Run on, it held every other tenant's prompts that long
    const costly = encode(thread, COSTLY, {}, 'costly');
    await assert.rejects(costly, /took longer than 1000 ms/);
    const text = 'a b c d '.repeat(500);
    assert.deepEqual(await encode(thread, text, {}, 'next'), model.tokenizer.encode(text));
  } finally {
    await thread.close();
  }
});

/** A call's outcome ('answered', or its error's code) and whether it has come yet. */
function watch(call: Promise<unknown>): { outcome: Promise<string | undefined>; settled(): boolean } {
  let settled = false;
  const outcome = call
    .then(
      () => 'answered',
      (e: { code?: string }) => e.code,
    )
    .finally(() => {
      settled = true;
    });
  return { outcome, settled: () => settled };
}

test('a short prompt never waits behind a long one: long prompts have a thread of their own', async () => {
  // a prompt of millions of characters is legal at a long context, and on one thread for all every tenant's next
  // prompt waited behind it (16 million spaces at a 131,072 context: over 10 s on Llama 3's vocabulary)
  const model = loadTestModel(SERVING_MODEL);
  const template = parseChatTemplate(model.chatTemplate!);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  const costly = watch(encode(thread, COSTLY, {}, 'costly'));
  try {
    const text = 'a b c d '.repeat(500); // past the inline bound, within the quick one
    assert.deepEqual(await encode(thread, text, {}, 'short'), model.tokenizer.encode(text, {}));
    const call = { messages: messages3000().slice(0, 40) as ChatMessage[], tools: undefined, context: 1 << 20 };
    assert.deepEqual(
      await thread.encodeChat(call, 'chat'),
      chatPromptTokens(template, model.tokenizer, call, Number.POSITIVE_INFINITY),
    );
    const costlySchema = { type: 'object', properties: { p: { type: 'string', format: 'email' } } };
    await assert.rejects(
      thread.checkGrammars([{ constraint: { kind: 'json_schema', schema: costlySchema }, param: SCHEMA_PARAM }], 'g'),
      (e: { code?: string }) => e.code === 'invalid_request_error',
    );
    assert.equal(costly.settled(), false, 'answered while the long prompt is still being tokenized');
  } finally {
    await thread.close();
  }
  assert.equal(await costly.outcome, 'internal_error', 'the long one fails with the close');
});

test("a short prompt does not wait behind another tenant's schema check: checks have a thread of their own", async () => {
  // a check may build for ~0.1-0.27 s (LIMITS.grammarWorkMax); on the short prompts' thread each held them that long
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    // 30 objects of 20 optional properties each: ~0.2 s of building, then refused as too complex
    const object = (k: number) => ({
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`p${k}_${i}`, { type: 'string' }])),
    });
    const schema = { anyOf: Array.from({ length: 30 }, (_, k) => object(k)) };
    const order: string[] = [];
    const check = thread
      .checkGrammars([{ constraint: { kind: 'json_schema', schema }, param: SCHEMA_PARAM }], 'schemas')
      .catch(() => undefined)
      .then(() => order.push('check'));
    const text = 'a b c d '.repeat(500);
    const short = encode(thread, text, {}, 'short').then(() => order.push('short'));
    await Promise.all([check, short]);
    assert.deepEqual(order, ['short', 'check']);
  } finally {
    await thread.close();
  }
});

/** The serving model's file with another chat template: one that prints each message's content 64 times. */
function expandingTemplateModel(): string {
  const made = makeTestModel(SERVING_MODEL);
  made.metadata.set('tokenizer.chat_template', {
    type: 'string',
    value: "{% for message in messages %}{% for i in range(64) %}{{ message['content'] }}{% endfor %}{% endfor %}",
  });
  const path = join(tempDirectory('kvfence-template-'), 'expanding.gguf');
  writeGguf(path, made.metadata, made.tensors);
  return path;
}

test("a small chat request that renders long goes on to the long prompts' thread, untokenized by the short one", async () => {
  // Llama 3.1's template pretty-prints tools at every level of nesting: 40 KB of JSON rendered to 16.5 million
  // characters and held the short prompts' thread ~4 s (review finding)
  const model = loadTestModel(SERVING_MODEL);
  const path = expandingTemplateModel();
  const template = parseChatTemplate(loadModelHead(path).chatTemplate!);
  const call = { messages: [{ role: 'user', content: 'a b c d '.repeat(250) }] as ChatMessage[], tools: undefined };
  const fresh = new EncoderThread(model.tokenizer, path, 60_000);
  try {
    // 2,000 characters in the request, 128,000 rendered: the same ids by way of the long prompts' thread
    const within = { ...call, context: 1 << 20 };
    assert.deepEqual(
      await fresh.encodeChat(within, 'chat'),
      chatPromptTokens(template, model.tokenizer, within, Number.POSITIVE_INFINITY),
    );
  } finally {
    await fresh.close();
  }
  const thread = new EncoderThread(model.tokenizer, path, 60_000);
  const costly = watch(encode(thread, COSTLY, {}, 'costly'));
  const chat = watch(thread.encodeChat({ ...call, context: 1 << 20 }, 'chat'));
  try {
    const text = 'a b c d '.repeat(500);
    assert.deepEqual(await encode(thread, text, {}, 'short'), model.tokenizer.encode(text, {}));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(chat.settled(), false, "the chat waits for the long prompts' thread");
  } finally {
    await thread.close();
  }
  assert.deepEqual(
    [await chat.outcome, await costly.outcome],
    ['internal_error', 'internal_error'],
    'both fail with the close',
  );
});

test("tenants take turns on the tokenizer thread: one's backlog delays another's prompt by one prompt", async () => {
  // in order of arrival, victims' long prompts waited 4–7 s behind one tenant's (I11 review)
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    const text = 'x y z '.repeat(20_000);
    const order: string[] = [];
    const answered = (name: string) => () => order.push(name);
    const flood = [0, 1, 2, 3].map((i) => encode(thread, text, {}, 'flood').then(answered(`flood${i}`)));
    const calm = encode(thread, text, {}, 'calm').then(answered('calm'));
    await Promise.all([...flood, calm]);
    // flood0 and calm are on the thread together, taking turns: either may be answered first
    assert.deepEqual(new Set(order.slice(0, 2)), new Set(['flood0', 'calm']));
    assert.deepEqual(order.slice(2), ['flood1', 'flood2', 'flood3']);
  } finally {
    await thread.close();
  }
});

test("a long prompt does not wait behind another tenant's: the long prompts' thread takes turns between tenants", async () => {
  // one thread running each call to its end held every tenant's long prompts behind one such call, up to its whole
  // time limit (16 million spaces at a 131,072 context: ~10 s on Llama 3's vocabulary)
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  const costly = watch(encode(thread, COSTLY, {}, 'costly'));
  try {
    const texts = ['a b c d '.repeat(QUICK_CHARS / 8 + 1), 'x'.repeat(QUICK_CHARS + 1)]; // both past the quick bound
    const answers = await Promise.all(texts.map((text, i) => encode(thread, text, {}, `victim${i}`)));
    assert.deepEqual(
      answers,
      texts.map((text) => model.tokenizer.encode(text)),
    );
    assert.equal(costly.settled(), false, 'answered while the costly prompt is still being tokenized');
  } finally {
    await thread.close();
  }
  assert.equal(await costly.outcome, 'internal_error', 'the costly one fails with the close');
});

test('one tenant holds at most 4 places on the tokenizer thread: its fifth long prompt is a 429, others still get theirs', async () => {
  const model = loadTestModel(SERVING_MODEL);
  const thread = new EncoderThread(model.tokenizer, model.path, 60_000);
  try {
    const text = 'a b c d '.repeat(500); // past the inline bound
    const expected = model.tokenizer.encode(text, {});
    const flood = Array.from({ length: 6 }, () =>
      encode(thread, text, {}, 'flood').catch((e: { code?: string }) => e.code),
    );
    const calm = encode(thread, text, {}, 'calm');
    const answers = await Promise.all(flood);
    assert.equal(answers.filter((a) => a === 'rate_limit_exceeded').length, 2);
    for (const a of answers) if (typeof a !== 'string') assert.deepEqual(a, expected);
    assert.deepEqual(await calm, expected);
    // answered, its places are free again
    assert.deepEqual(await encode(thread, text, {}, 'flood'), expected);
  } finally {
    await thread.close();
  }
});
