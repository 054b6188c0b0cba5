/**
 * I2 at the door for a client's text, wherever it is tokenized (the event loop, or the tokenizer thread): a text
 * longer than any `context` tokens can stand for is refused before tokenizing, tokenizing stops once the ids exceed
 * the context or are sure to (tokenizer.ts encodeUpTo), and such a text is refused too. And a chat prompt's ids, from
 * its messages through the chat template.
 */
import type { Template } from '@huggingface/jinja';
import type { ChatMessage } from '../model/chat-template.js';
import type { EncodeOptions, Tokenizer } from '../model/tokenizer.js';
import { KvfenceError } from '../util/errors.js';
import { finish, type Steps } from '../util/steps.js';
import { renderChatPrompt } from './chat-prompt.js';

export type PromptParam = 'messages' | 'prompt';

function tooLong(context: number, param: PromptParam, what: string): KvfenceError {
  return new KvfenceError(
    'context_length_exceeded',
    `This model's maximum context length is ${context} tokens. However, your ${param} ${what}. ` +
      `Please reduce the length of the ${param}.`,
    param,
  );
}

/**
 * Refuses a text longer than `context` of the vocabulary's longest tokens, before any tokenizing: the bound the body
 * limit is derived from (body-limit.ts). Every character counts, the whitespace a Phi-3 special token swallows too: one
 * such token can stand for any run of it, but leaving the run out took a scan on the event loop, and in a chat message
 * the token's text is literal and swallows nothing, so the tokenizer worked through what the scan had left out.
 */
export function checkTextLength(tokenizer: Tokenizer, text: string, context: number, param: PromptParam): void {
  const charsMax = context * tokenizer.longestTokenChars;
  if (text.length > charsMax)
    throw tooLong(
      context,
      param,
      `is ${text.length} characters long, more than the ${charsMax} this server reads for ${context} tokens ` +
        `(${tokenizer.longestTokenChars} characters a token, the longest token's; ` +
        'whitespace after special tokens counts too)',
    );
}

/** The ids, or a 400 when there were more than the context (tokenizing stopped there: `encodeUpTo`). */
export function idsWithin(ids: number[] | undefined, context: number, param: PromptParam): number[] {
  if (ids === undefined) throw tooLong(context, param, `is more than ${context} tokens long`);
  return ids;
}

/** `text` as ids, at most one context's worth of work, or a 400 naming `param`. Synchronous: on the calling thread. */
export function encodeBounded(
  tokenizer: Tokenizer,
  text: string,
  options: EncodeOptions,
  context: number,
  param: PromptParam,
): number[] {
  return finish(encodeBoundedSteps(tokenizer, text, options, context, param));
}

/** encodeBounded in steps (tokenizer.ts encodeSteps) */
function* encodeBoundedSteps(
  tokenizer: Tokenizer,
  text: string,
  options: EncodeOptions,
  context: number,
  param: PromptParam,
): Steps<number[]> {
  checkTextLength(tokenizer, text, context, param);
  return idsWithin(yield* tokenizer.encodeSteps(text, context, options), context, param);
}

/** What a chat prompt is made of: the messages, the request's tool definitions, the context it must fit. */
export interface ChatCall {
  messages: ChatMessage[];
  tools: readonly unknown[] | undefined;
  context: number;
}

/**
 * A chat prompt's ids: the messages through the chat template (the template's special tokens parsed, the messages'
 * own text literal: chat-prompt.ts), bounded like any client text; or undefined, untokenized, when the rendered prompt
 * is longer than `renderedMax` characters: a chat template can print a small request at length (tools pretty-printed
 * at every level of a deep nesting: 40 KB of JSON rendered to 16.5 million characters in ~60 ms, then seconds of
 * tokenizing), so the caller sends it where that is allowed to take long.
 */
export function chatPromptTokens(
  template: Template,
  tokenizer: Tokenizer,
  call: ChatCall,
  renderedMax: number,
): number[] | undefined {
  return finish(chatPromptSteps(template, tokenizer, call, renderedMax));
}

/** chatPromptTokens in steps (tokenizer.ts encodeSteps), for a thread that takes turns between prompts */
export function* chatPromptSteps(
  template: Template,
  tokenizer: Tokenizer,
  call: ChatCall,
  renderedMax: number,
): Steps<number[] | undefined> {
  const { text, literalRanges } = renderChatPrompt(template, call.messages, tokenizer, call.tools);
  if (text.length > renderedMax) return undefined;
  yield; // rendering took up to ~60 ms (16.5 million characters)
  const options = { addSpecial: false, parseSpecial: true, literalRanges };
  return yield* encodeBoundedSteps(tokenizer, text, options, call.context, 'messages');
}
