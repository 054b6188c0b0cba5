import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { REAL_VOCABULARIES } from '../../test/helpers/real-vocab.js';
import { KvfenceError } from '../util/errors.js';
import {
  CHAT_TEMPLATE_PROBE_MS_MAX,
  type ChatMessage,
  loadChatTemplate,
  parseChatTemplate,
  renderChatTemplate,
} from './chat-template.js';
import { metaString } from './gguf-types.js';
import { tokenizerFromGguf } from './tokenizer.js';
import { buildTestVocabulary, CHATML_TEMPLATE, LLAMA2_TEMPLATE } from './vocab-build.js';

const CONVERSATION: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi there' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'Bye' },
];

describe('renderChatTemplate', () => {
  it('renders ChatML for the gpt2 test vocabulary, and its markers tokenize as control tokens', () => {
    const meta = buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 1000, seed: 1 });
    const prompt = renderChatTemplate(metaString(meta, 'tokenizer.chat_template')!, CONVERSATION, {
      addGenerationPrompt: true,
      bosToken: '<|endoftext|>',
      eosToken: '<|im_end|>',
    });
    assert.equal(
      prompt,
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n' +
        '<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n',
    );
    const tok = tokenizerFromGguf(meta);
    const ids = tok.encode(prompt, { parseSpecial: true });
    assert.equal(ids.filter((id) => id === 999).length, 4, 'four <|im_end|>');
    assert.equal(ids.filter((id) => id === 998).length, 5, 'five <|im_start|>');
  });

  it('renders a Llama 2 [INST] prompt for the llama test vocabulary', () => {
    const meta = buildTestVocabulary({ kind: 'llama', pre: 'gpt-2', vocabSize: 1000, seed: 1 });
    const prompt = renderChatTemplate(metaString(meta, 'tokenizer.chat_template')!, CONVERSATION, {
      addGenerationPrompt: true,
      bosToken: '<s>',
      eosToken: '</s>',
    });
    assert.equal(
      prompt,
      '<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s><s>[INST] Bye [/INST]',
    );
    const ids = tokenizerFromGguf(meta).encode(prompt, { parseSpecial: true });
    assert.equal(ids[0], 1);
    assert.equal(ids.filter((id) => id === 1).length, 2);
    assert.equal(ids.filter((id) => id === 2).length, 1);
  });

  it('leaves out the generation prompt when not asked', () => {
    const template = metaString(
      buildTestVocabulary({ kind: 'gpt2', pre: 'qwen2', vocabSize: 600, seed: 1 }),
      'tokenizer.chat_template',
    )!;
    const prompt = renderChatTemplate(template, [{ role: 'user', content: 'x' }], {
      addGenerationPrompt: false,
      bosToken: '',
      eosToken: '',
    });
    assert.equal(prompt, '<|im_start|>user\nx<|im_end|>\n');
  });

  it('reports a template that does not parse as a bad model file', () => {
    assert.throws(
      () => parseChatTemplate('{% for m in messages %}{{ m.content }'),
      (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_model_file' && !e.message.includes('\n'),
    );
  });

  it('reports messages the template refuses as a bad request', () => {
    const template = metaString(
      buildTestVocabulary({ kind: 'llama', pre: 'gpt-2', vocabSize: 600, seed: 1 }),
      'tokenizer.chat_template',
    )!;
    const options = { addGenerationPrompt: true, bosToken: '<s>', eosToken: '</s>' };
    assert.throws(
      () => renderChatTemplate(template, [{ role: 'assistant', content: 'first' }], options),
      (e: unknown) =>
        e instanceof KvfenceError && e.code === 'invalid_request_error' && e.message.includes('alternate'),
    );
  });
});

// a Hermes-style template written for these tests: tools in a system turn, calls and responses in the history
const TOOL_TEMPLATE =
  '{%- if tools %}<|im_start|>system\n# Tools{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}' +
  "{%- for message in messages %}{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant" +
  '{% for call in message.tool_calls %}\n<tool_call>{"name": "{{ call.function.name }}", "arguments": ' +
  '{{ call.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>\n' +
  "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>{{ message.content }}</tool_response><|im_end|>\n" +
  '{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}{%- endfor %}' +
  '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

describe('tools in chat templates', () => {
  it('the tools variable, assistant tool_calls (arguments as objects) and tool messages render as Hugging Face does', () => {
    const tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object' } } }];
    const prompt = renderChatTemplate(
      TOOL_TEMPLATE,
      [
        { role: 'user', content: '1+2?' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: { a: 1, b: 2 } } }],
        },
        { role: 'tool', content: '3', tool_call_id: 'call_1' },
      ],
      { addGenerationPrompt: true, bosToken: '', eosToken: '', tools },
    );
    // (trim_blocks, as transformers renders chat templates: the newline after a block tag goes)
    assert.equal(
      prompt,
      '<|im_start|>system\n# Tools{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}<|im_end|>\n' +
        '<|im_start|>user\n1+2?<|im_end|>\n' +
        '<|im_start|>assistant<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call><|im_end|>' +
        '<|im_start|>user\n<tool_response>3</tool_response><|im_end|><|im_start|>assistant\n',
    );
    const without = renderChatTemplate(TOOL_TEMPLATE, [{ role: 'user', content: 'hi' }], {
      addGenerationPrompt: false,
      bosToken: '',
      eosToken: '',
    });
    assert.equal(without, '<|im_start|>user\nhi<|im_end|>\n', 'no tools: no tools turn');
  });
});

describe('loadChatTemplate (a server renders the template once at load)', () => {
  const tokens = { bosToken: '<s>', eosToken: '</s>' };
  /** Mistral 7B Instruct v0.1's: refuses a system turn with its own raise_exception */
  const MISTRAL_TEMPLATE =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}" +
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
  /** Phi-3 mini's */
  const PHI3_TEMPLATE =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}" +
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}" +
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}" +
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

  it('passes every template the tests use and the real Llama 3, Qwen 3 and Gemma 3 ones', () => {
    const real = (['llama3', 'qwen3', 'gemma3'] as const).map((name) => {
      const config = join(dirname(REAL_VOCABULARIES[name]), 'tokenizer_config.json');
      return (JSON.parse(readFileSync(config, 'utf8')) as { chat_template: string }).chat_template;
    });
    for (const source of [CHATML_TEMPLATE, LLAMA2_TEMPLATE, TOOL_TEMPLATE, MISTRAL_TEMPLATE, PHI3_TEMPLATE, ...real]) {
      const template = loadChatTemplate(source, tokens);
      assert.ok(
        renderChatTemplate(template, [{ role: 'user', content: 'hi' }], { addGenerationPrompt: true, ...tokens }),
      );
    }
  });

  const refused = (pattern: RegExp) => (e: unknown) =>
    e instanceof KvfenceError && e.code === 'invalid_model_file' && pattern.test(e.message);

  it('refuses a template that takes longer than the bound (it would, on the event loop, for every request)', () => {
    const slow = '{% for i in range(300000) %}{% endfor %}{{ messages[0].content }}';
    const pattern = new RegExp(
      `took \\d+ ms to render a 4-message conversation, over the ${CHAT_TEMPLATE_PROBE_MS_MAX} ms`,
    );
    assert.throws(() => loadChatTemplate(slow, tokens), refused(pattern));
  });

  it('refuses a template that would hang the server or end it: killed past its time or its heap, in its own process', () => {
    // three loops of 10,000 deep: hours; rendered in the server's process it hung the start for good
    const endless =
      '{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}{% endfor %}{% endfor %}{% endfor %}';
    const started = performance.now();
    assert.throws(
      () => loadChatTemplate(endless, tokens, 2_000),
      refused(/did not finish rendering a 4-message conversation within 2000 ms/),
    );
    assert.ok(performance.now() - started < 5_000, 'killed at its bound');
    // a range too large to hold: V8 aborted the whole process ("Fatal JavaScript invalid size error")
    const huge = '{% for i in range(100000000000) %}{% endfor %}';
    assert.throws(() => loadChatTemplate(huge, tokens), refused(/could not render a 4-message conversation within/));
  });

  it('refuses a template that fails with or without a system turn', () => {
    const failing = /fails on a system, user, assistant, user conversation: /;
    assert.throws(() => loadChatTemplate("{{ raise_exception('broken') }}", tokens), refused(failing));
    assert.throws(() => loadChatTemplate('{{ messages[0].content.nope() }}', tokens), refused(failing));
  });
});
