import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { type ChatMessage, parseChatTemplate, renderChatTemplate } from './chat-template.js';
import { metaString } from './gguf-types.js';
import { tokenizerFromGguf } from './tokenizer.js';
import { buildTestVocabulary } from './vocab-build.js';

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
