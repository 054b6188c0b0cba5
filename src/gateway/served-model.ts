/** The model a gateway serves, as the gateway needs it: its public id, tokenizer and parsed chat template. */
import type { Template } from '@huggingface/jinja';
import { loadChatTemplate } from '../model/chat-template.js';
import { EncoderThread } from '../model/encoder-thread.js';
import type { ModelHead } from '../model/load-model.js';
import type { EncodeOptions, Tokenizer } from '../model/tokenizer.js';
import { KvfenceError } from '../util/errors.js';
import { renderChatPrompt, templateTokens } from './chat-prompt.js';
import type { PromptInput } from './schemas.js';
import { type ToolCallFormat, toolCallFormatOf } from './tool-calls.js';

export interface ServedModel {
  id: string;
  createdS: number;
  vocabSize: number;
  tokenizer: Tokenizer;
  /** the tokenizer off the event loop, for texts from clients */
  encoder: EncoderThread;
  chatTemplate: Template | undefined;
  /** how the model writes tool calls, by its chat template */
  toolCallFormat: ToolCallFormat;
}

/** A long prompt's tokenization is answered within this or refused (503): it runs off the event loop, bounded. */
const TOKENIZE_TIMEOUT_MS = 10_000;

export function servedModel(model: ModelHead, id: string): ServedModel {
  // checked (rendered once, bounded in time) before the tokenizer thread starts: a refused template leaves none running
  const chatTemplate =
    model.chatTemplate === undefined
      ? undefined
      : loadChatTemplate(model.chatTemplate, templateTokens(model.tokenizer));
  return {
    id,
    createdS: Math.floor(Date.now() / 1000),
    vocabSize: model.config.vocabSize,
    tokenizer: model.tokenizer,
    encoder: new EncoderThread(model.tokenizer, model.path, TOKENIZE_TIMEOUT_MS),
    chatTemplate,
    toolCallFormat: toolCallFormatOf(model.chatTemplate),
  };
}

/**
 * A client's text as token ids, never more work than `context` tokens' worth (I2 at the door): a text longer than any
 * `context` tokens can stand for is refused before tokenizing, and tokenizing stops once the ids exceed the context
 * (refused too). Long texts are tokenized off the event loop.
 */
export async function encodeClientText(
  model: ServedModel,
  text: string,
  options: EncodeOptions,
  context: number,
  param: 'messages' | 'prompt',
  tenant: string,
): Promise<number[]> {
  const tooLong = (what: string) =>
    new KvfenceError(
      'context_length_exceeded',
      `This model's maximum context length is ${context} tokens. However, your ${param} ${what}. ` +
        `Please reduce the length of the ${param}.`,
      param,
    );
  const charsMax = context * model.tokenizer.longestTokenChars;
  if (text.length > charsMax && model.tokenizer.countedChars(text) > charsMax)
    throw tooLong(`is ${text.length} characters long, more than ${context} tokens can hold`);
  const ids = await model.encoder.encode(text, { ...options, stopAfter: context }, tenant);
  if (ids.length > context) throw tooLong(`is more than ${context} tokens long`);
  return ids;
}

/**
 * The prompt's token ids: chat messages through the chat template (with the request's tool definitions as its
 * `tools`), text through the tokenizer (a text over `context` tokens is refused), ids as given.
 */
export async function promptTokens(
  model: ServedModel,
  prompt: PromptInput,
  context: number,
  tenant: string,
  tools?: readonly unknown[],
): Promise<number[]> {
  const { tokenizer } = model;
  switch (prompt.kind) {
    case 'tokens':
      for (const id of prompt.tokens) {
        if (id < 0 || id >= model.vocabSize)
          throw new KvfenceError('invalid_request_error', `token id ${id} is outside the vocabulary`, 'prompt');
      }
      return prompt.tokens;
    case 'text':
      if (prompt.text === '') throw new KvfenceError('invalid_request_error', 'the prompt is empty', 'prompt');
      // completions prompts are often templated already: their special-token text is parsed, as llama.cpp's server
      // and vLLM do (docs/api.md)
      return encodeClientText(model, prompt.text, { addSpecial: true, parseSpecial: true }, context, 'prompt', tenant);
    case 'messages': {
      if (model.chatTemplate === undefined) {
        throw new KvfenceError(
          'invalid_request_error',
          `model ${model.id} has no chat template: use /v1/completions`,
          'messages',
        );
      }
      // the template's special tokens are parsed; the messages' own text is not (chat-prompt.ts)
      const { text, literalRanges } = renderChatPrompt(model.chatTemplate, prompt.messages, tokenizer, tools);
      const options = { addSpecial: false, parseSpecial: true, literalRanges };
      return encodeClientText(model, text, options, context, 'messages', tenant);
    }
  }
}
