// Request fields as OpenAI defines them: the completions prompt's forms (a string, token ids, or a batch of one of
// either), typed options, and what is refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { parseChatRequest, parseCompletionRequest } from './schemas.js';

const prompt = (value: unknown) => parseCompletionRequest({ model: 'm', prompt: value }, 512).prompt;

test('a prompt is a string, token ids, or a batch of one of either', () => {
  assert.deepEqual(prompt('hi'), { kind: 'text', text: 'hi' });
  assert.deepEqual(prompt(['hi']), { kind: 'text', text: 'hi' });
  assert.deepEqual(prompt([1, 2, 3]), { kind: 'tokens', tokens: [1, 2, 3] });
  assert.deepEqual(prompt([[1, 2, 3]]), { kind: 'tokens', tokens: [1, 2, 3] });
});

test('a prompt nested deeper than a batch is a 400, however deep (it overflowed the stack: a 500)', () => {
  const refused = (value: unknown) =>
    assert.throws(
      () => prompt(value),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_request_error' && e.param === 'prompt',
    );
  refused([[[1]]]);
  refused([['hi']]);
  let deep: unknown = [1];
  for (let i = 0; i < 20_000; i++) deep = [deep];
  refused(deep);
});

test('stream_options.include_usage and user are checked for their type, not read as false or ignored', () => {
  const parse = (extra: object) => parseCompletionRequest({ model: 'm', prompt: 'hi', ...extra }, 512);
  const refused = (extra: object, param: string) =>
    assert.throws(
      () => parse(extra),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_request_error' && e.param === param,
    );
  assert.equal(parse({ stream: true, stream_options: { include_usage: true } }).includeUsage, true);
  assert.equal(parse({ stream: true, stream_options: {} }).includeUsage, false);
  refused({ stream: true, stream_options: { include_usage: 'yes' } }, 'stream_options.include_usage');
  assert.equal(parse({ user: 'end-user-7' }).prompt.kind, 'text');
  refused({ user: 42 }, 'user');
});

test('max_tokens past the bound names the bound (it was "must be a positive integer", which it is)', () => {
  const messages = [{ role: 'user', content: 'hi' }];
  const requests: [string, () => unknown][] = [
    ['max_tokens', () => parseCompletionRequest({ model: 'm', prompt: 'hi', max_tokens: 2_000_000 }, 512)],
    ['max_tokens', () => parseChatRequest({ model: 'm', messages, max_tokens: 2_000_000 }, 512)],
    ['max_completion_tokens', () => parseChatRequest({ model: 'm', messages, max_completion_tokens: 2_000_000 }, 512)],
  ];
  for (const [field, parse] of requests)
    assert.throws(
      parse,
      (e: unknown) =>
        e instanceof KvfenceError && e.param === field && /must be an integer from 1 to 1048576/.test(e.message),
    );
});

test('what a chat body brings back from the body thread is bounded: tool definitions and history arguments', () => {
  const refused = (body: Record<string, unknown>, param: string, message: RegExp) =>
    assert.throws(
      () => parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }, 600),
      (e: unknown) => e instanceof KvfenceError && e.param === param && message.test(e.message),
    );
  // with tool_choice auto a definition went to the template as sent, a junk field of 490k objects with it
  const junk = Array.from({ length: 100_000 }, () => ({}));
  refused(
    { tools: [{ type: 'function', function: { name: 'f', parameters: {}, junk } }] },
    'tools[0]',
    /bytes of JSON/,
  );
  const call = (i: number, args: unknown) => ({
    id: `c${i}`,
    type: 'function',
    function: { name: 'f', arguments: JSON.stringify(args) },
  });
  const history = (args: unknown[]) => [
    { role: 'user', content: 'hi' },
    { role: 'assistant', content: null, tool_calls: args.map((a, i) => call(i, a)) },
  ];
  // the arguments of all calls together: 40,000 objects and arrays at most
  const part = { a: Array.from({ length: 15_000 }, () => ({})) };
  assert.doesNotThrow(() => parseChatRequest({ model: 'm', messages: history([part, part]) }, 600));
  refused(
    { messages: history([part, part, part]) },
    'messages[1].tool_calls[2].function.arguments',
    /more than 40000 objects and arrays/,
  );
});
