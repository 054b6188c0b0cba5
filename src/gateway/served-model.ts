/** The model a gateway serves, as the gateway needs it: its public id, tokenizer and parsed chat template. */
import type { Template } from '@huggingface/jinja';
import { loadChatTemplate } from '../model/chat-template.js';
import { EncoderThread, INLINE_CHARS } from '../model/encoder-thread.js';
import type { ModelHead } from '../model/load-model.js';
import type { EncodeOptions, Tokenizer } from '../model/tokenizer.js';
import { KvfenceError } from '../util/errors.js';
import { textWithin } from '../util/text-within.js';
import { templateTokens } from './chat-prompt.js';
import { chatPromptTokens, checkTextLength, idsWithin, type PromptParam } from './prompt-length.js';
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
  // checked (rendered once, in a process of its own, bounded in time and memory) before the tokenizer thread starts: a
  // refused template leaves none running
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
 * A conversation up to this many messages, INLINE_CHARS of JSON in all, renders on the event loop (well under 1 ms;
 * 6 ms at most seen: tools nested 250 deep), and is tokenized there when it renders within INLINE_CHARS.
 */
const INLINE_MESSAGES = 16;

/**
 * A client's text as token ids, never more work than `context` tokens' worth (I2 at the door: prompt-length.ts). Long
 * texts are tokenized off the event loop.
 */
export async function encodeClientText(
  model: ServedModel,
  text: string,
  options: EncodeOptions,
  context: number,
  param: PromptParam,
  tenant: string,
): Promise<number[]> {
  checkTextLength(model.tokenizer, text, context, param);
  return idsWithin(await model.encoder.encodeUpTo(text, context, options, tenant), context, param);
}

/**
 * The prompt's token ids: chat messages through the chat template (with the request's tool definitions as its
 * `tools`), text through the tokenizer (a text over `context` tokens is refused), ids as given. A chat prompt of more
 * than a few short messages renders and tokenizes on the tokenizer thread, bounded per tenant like long texts.
 */
export async function promptTokens(
  model: ServedModel,
  prompt: PromptInput,
  context: number,
  tenant: string,
  tools?: readonly unknown[],
): Promise<number[]> {
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
      const call = { messages: prompt.messages, tools, context };
      if (prompt.messages.length <= INLINE_MESSAGES && textWithin([prompt.messages, tools], INLINE_CHARS)) {
        // tokenized here only if it renders within INLINE_CHARS too: a chat template can print a small request at
        // length (Llama 3.1's pretty-prints tools at every level of their nesting: 1.8 KB of JSON rendered to 870,000
        // characters in 6 ms, then took the event loop 316 ms of tokenizing)
        const ids = chatPromptTokens(model.chatTemplate, model.tokenizer, call, INLINE_CHARS);
        if (ids !== undefined) return ids;
      }
      return model.encoder.encodeChat(call, tenant);
    }
  }
}
