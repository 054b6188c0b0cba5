/**
 * Renders a model's chat template (tokenizer.chat_template, Jinja) into a prompt with @huggingface/jinja, the
 * implementation transformers.js uses. A template that does not parse is the model file's fault; one that fails while
 * rendering (raise_exception on alternating roles, a missing field) is answered as a bad request.
 */
import { Template } from '@huggingface/jinja';
import { errorMessage, KvfenceError } from '../util/errors.js';

export type ChatRole = 'system' | 'user' | 'assistant' | 'tool';

export interface ChatToolCall {
  id: string;
  type: 'function';
  /** arguments as parsed JSON: templates print them with tojson, as Hugging Face's do */
  function: { name: string; arguments: unknown };
}

export interface ChatMessage {
  role: ChatRole;
  content: string;
  /** an assistant turn's tool calls */
  tool_calls?: ChatToolCall[];
  /** a tool turn: the call it answers */
  tool_call_id?: string;
}

export interface ChatTemplateOptions {
  /** end with the assistant's turn header so the model writes the reply */
  addGenerationPrompt: boolean;
  bosToken: string;
  eosToken: string;
  /** the request's tool definitions ({type: 'function', function: {...}}), as the template's `tools` variable */
  tools?: readonly unknown[];
}

/** Parses a template once, so a server can check it at model load rather than on the first request. */
export function parseChatTemplate(template: string): Template {
  try {
    return new Template(template);
  } catch (error) {
    throw new KvfenceError('invalid_model_file', `chat template does not parse: ${firstLine(errorMessage(error))}`);
  }
}

export function renderChatTemplate(
  template: string | Template,
  messages: readonly ChatMessage[],
  options: ChatTemplateOptions,
): string {
  const parsed = typeof template === 'string' ? parseChatTemplate(template) : template;
  try {
    return parsed.render({
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: options.addGenerationPrompt,
      bos_token: options.bosToken,
      eos_token: options.eosToken,
      ...(options.tools !== undefined ? { tools: options.tools } : {}),
    });
  } catch (error) {
    throw new KvfenceError(
      'invalid_request_error',
      `chat template rejected the messages: ${firstLine(errorMessage(error))}`,
    );
  }
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0];
}
