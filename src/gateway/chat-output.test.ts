import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ChatDelta, ChatOutput } from './chat-output.js';
import { parseToolCalls, toolCallFormatOf } from './tool-calls.js';
import type { ToolChoice } from './tool-request.js';

const NAMES = new Set(['get_weather', 'add']);

/** Feeds text in small pieces; returns the streamed deltas and the final message. */
function run(choice: ToolChoice | undefined, format: 'hermes' | 'llama3_json', text: string, cut = false) {
  const out = new ChatOutput(choice, format, NAMES);
  const deltas: ChatDelta[] = [];
  for (let i = 0; i < text.length; i += 3) deltas.push(...out.push(text.slice(i, i + 3)));
  const end = out.finish(cut);
  deltas.push(...end.deltas);
  return { deltas, message: end.message };
}

/** What a client rebuilds from the deltas (OpenAI's accumulation rules). */
function rebuild(deltas: ChatDelta[]) {
  let content = '';
  const calls: { id?: string; name?: string; arguments: string }[] = [];
  for (const d of deltas) {
    if ('content' in d) content += d.content;
    else
      for (const c of d.tool_calls) {
        calls[c.index] ??= { arguments: '' };
        const call = calls[c.index]!;
        if (c.id !== undefined) call.id = c.id;
        if (c.function.name !== undefined) call.name = c.function.name;
        call.arguments += c.function.arguments;
      }
  }
  return { content, calls };
}

describe('tool calls in model output', () => {
  it('hermes: <tool_call> blocks anywhere, the text around them is content', () => {
    const text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const parsed = parseToolCalls(text, 'hermes', NAMES);
    assert.equal(parsed.content, 'Let me check.');
    assert.deepEqual(
      parsed.toolCalls.map((c) => c.function),
      [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }],
    );
    const two = parseToolCalls(
      '<tool_call>{"name":"add","arguments":{"a":1}}</tool_call><tool_call>{"name":"add","arguments":{"a":2}}</tool_call>',
      'hermes',
      NAMES,
    );
    assert.equal(two.toolCalls.length, 2);
    assert.equal(two.content, null);
    assert.deepEqual(
      parseToolCalls('<tool_call>{"name":"nope","arguments":{}}</tool_call>', 'hermes', NAMES).toolCalls,
      [],
    );
  });

  it('llama3_json: the whole answer is a call (parameters or arguments), or several separated by ;', () => {
    const one = parseToolCalls(' {"name": "add", "parameters": {"a": 1, "b": 2}}', 'llama3_json', NAMES);
    assert.deepEqual(one.toolCalls[0]!.function, { name: 'add', arguments: '{"a":1,"b":2}' });
    assert.equal(one.content, null);
    const two = parseToolCalls(
      '{"name":"add","parameters":{"a":1}}; {"name":"get_weather","arguments":{}}',
      'llama3_json',
      NAMES,
    );
    assert.deepEqual(
      two.toolCalls.map((c) => c.function.name),
      ['add', 'get_weather'],
    );
    assert.equal(parseToolCalls('{"x": 1}', 'llama3_json', NAMES).content, '{"x": 1}');
    assert.equal(toolCallFormatOf('{{ "<tool_call>" }}'), 'hermes');
    assert.equal(toolCallFormatOf(undefined), 'llama3_json');
  });

  it('streams: auto holds only what may start a call; calls arrive as delta.tool_calls; plain text stays content', () => {
    const hermes = run({ kind: 'auto' }, 'hermes', 'Sure. <tool_call>{"name":"add","arguments":{"a":1}}</tool_call>');
    const h = rebuild(hermes.deltas);
    assert.equal(h.content, 'Sure. ');
    assert.deepEqual(
      h.calls.map((c) => [c.name, c.arguments]),
      [['add', '{"a":1}']],
    );
    assert.equal(hermes.message.tool_calls?.[0]?.id, h.calls[0]!.id);
    const prose = run({ kind: 'auto' }, 'hermes', 'a <tool_ca is not a call');
    assert.equal(rebuild(prose.deltas).content, 'a <tool_ca is not a call');
    assert.equal(prose.message.tool_calls, undefined);
    const llama = run({ kind: 'auto' }, 'llama3_json', '{"name":"get_weather","parameters":{"city":"Rome"}}');
    assert.deepEqual(
      rebuild(llama.deltas).calls.map((c) => c.arguments),
      ['{"city":"Rome"}'],
    );
    const notCall = run({ kind: 'auto' }, 'llama3_json', '{"answer": 42}');
    assert.equal(rebuild(notCall.deltas).content, '{"answer": 42}');
    // leading whitespace is held until the answer shows whether it opens with a call, then goes with the content
    const spaced = run({ kind: 'auto' }, 'llama3_json', ' \n\t   \u3000 Hello { there');
    assert.equal(rebuild(spaced.deltas).content, ' \n\t   \u3000 Hello { there');
    assert.ok(spaced.deltas.length > 2, 'the content streams once it starts');
    const spacedCall = run({ kind: 'auto' }, 'llama3_json', ' \n \n {"name":"add","parameters":{"a":1}}');
    assert.deepEqual(
      rebuild(spacedCall.deltas).calls.map((c) => [c.name, c.arguments]),
      [['add', '{"a":1}']],
    );
    const blank = run({ kind: 'auto' }, 'llama3_json', '   \n  ');
    assert.equal(blank.message.content, '   \n  ');
  });

  it('named: the text is the arguments, streamed as they come; required: a constrained array of calls', () => {
    const named = run({ kind: 'named', name: 'add' }, 'hermes', '{"a":1,"b":2}');
    assert.ok(named.deltas.length > 2, 'arguments stream in pieces');
    assert.deepEqual(rebuild(named.deltas).calls, [
      { id: named.message.tool_calls![0]!.id, name: 'add', arguments: '{"a":1,"b":2}' },
    ]);
    assert.equal(named.message.content, null);
    const required = run(
      { kind: 'required' },
      'hermes',
      '[{"name":"add","arguments":{"a":1}},{"name":"get_weather","arguments":{"city":"x"}}]',
    );
    assert.deepEqual(
      rebuild(required.deltas).calls.map((c) => [c.name, c.arguments]),
      [
        ['add', '{"a":1}'],
        ['get_weather', '{"city":"x"}'],
      ],
    );
    const cut = run({ kind: 'required' }, 'hermes', '[{"name":"add","argu', true);
    assert.deepEqual(cut.message, { role: 'assistant', content: '[{"name":"add","argu' });
  });

  it('without tools (or none) everything is content, piece by piece', () => {
    const none = run({ kind: 'none' }, 'hermes', '<tool_call>{"name":"add","arguments":{}}</tool_call>');
    assert.equal(rebuild(none.deltas).content, '<tool_call>{"name":"add","arguments":{}}</tool_call>');
    assert.equal(run(undefined, 'hermes', 'hello').message.content, 'hello');
  });
});
