/** The model a gateway serves, as the gateway needs it: its public id, tokenizer and parsed chat template. */
import type { Template } from '@huggingface/jinja';
import { parseChatTemplate, renderChatTemplate } from '../model/chat-template.js';
import type { LoadedModel } from '../model/load-model.js';
import type { Tokenizer } from '../model/tokenizer.js';
import { KvfenceError } from '../util/errors.js';
import type { PromptInput } from './schemas.js';
import { type ToolCallFormat, toolCallFormatOf } from './tool-calls.js';

export interface ServedModel {
  id: string;
  createdS: number;
  vocabSize: number;
  tokenizer: Tokenizer;
  chatTemplate: Template | undefined;
  /** how the model writes tool calls, by its chat template */
  toolCallFormat: ToolCallFormat;
}

export function servedModel(model: LoadedModel, id: string): ServedModel {
  return {
    id,
    createdS: Math.floor(Date.now() / 1000),
    vocabSize: model.config.vocabSize,
    tokenizer: model.tokenizer,
    chatTemplate: model.chatTemplate === undefined ? undefined : parseChatTemplate(model.chatTemplate),
    toolCallFormat: toolCallFormatOf(model.chatTemplate),
  };
}

/**
 * The prompt's token ids: chat messages through the chat template (with the request's tool definitions as its
 * `tools`), text through the tokenizer, ids as given.
 */
export function promptTokens(model: ServedModel, prompt: PromptInput, tools?: readonly unknown[]): number[] {
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
      return tokenizer.encode(prompt.text, { addSpecial: true, parseSpecial: false });
    case 'messages': {
      if (model.chatTemplate === undefined) {
        throw new KvfenceError(
          'invalid_request_error',
          `model ${model.id} has no chat template: use /v1/completions`,
          'messages',
        );
      }
      const text = renderChatTemplate(model.chatTemplate, prompt.messages, {
        addGenerationPrompt: true,
        bosToken: tokenizer.bosId !== undefined ? tokenizer.tokenText(tokenizer.bosId) : '',
        eosToken: tokenizer.eosId !== undefined ? tokenizer.tokenText(tokenizer.eosId) : '',
        ...(tools !== undefined ? { tools } : {}),
      });
      return tokenizer.encode(text, { addSpecial: false, parseSpecial: true });
    }
  }
}
