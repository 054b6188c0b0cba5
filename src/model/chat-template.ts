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

/** The variables a template sees, as transformers gives them. */
function templateVariables(messages: readonly ChatMessage[], options: ChatTemplateOptions): Record<string, unknown> {
  return {
    messages: messages.map((m) => ({ ...m })),
    add_generation_prompt: options.addGenerationPrompt,
    bos_token: options.bosToken,
    eos_token: options.eosToken,
    ...(options.tools !== undefined ? { tools: options.tools } : {}),
  };
}

export function renderChatTemplate(
  template: string | Template,
  messages: readonly ChatMessage[],
  options: ChatTemplateOptions,
): string {
  const parsed = typeof template === 'string' ? parseChatTemplate(template) : template;
  try {
    return parsed.render(templateVariables(messages, options));
  } catch (error) {
    throw new KvfenceError(
      'invalid_request_error',
      `chat template rejected the messages: ${firstLine(errorMessage(error))}`,
    );
  }
}

/**
 * A template renders synchronously on the gateway's event loop, for every chat request, and nothing bounds its time or
 * memory there (a sandbox is future work): so a server renders it once at load and refuses a template slower than this
 * on a four-message conversation. Real templates (ChatML, Llama 2/3, Gemma, Qwen, Mistral, Phi-3) take well under a
 * millisecond; `{% for i in range(1000000) %}` took 4 s, on every request. A template that exhausts memory at once
 * still does, but at load rather than under traffic.
 */
export const CHAT_TEMPLATE_PROBE_MS_MAX = 250;
const PROBE_CONVERSATION: readonly ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Hello!' },
  { role: 'assistant', content: 'Hi. How can I help?' },
  { role: 'user', content: 'Tell me a joke.' },
];

/**
 * Parses a model's template for serving and renders it once on a small conversation: one that fails there or takes
 * longer than CHAT_TEMPLATE_PROBE_MS_MAX is refused as a bad model file. A template may refuse a system turn with its
 * own raise_exception (Mistral's, Gemma 2's): one that fails with it is probed again without it.
 */
export function loadChatTemplate(source: string, tokens: Pick<ChatTemplateOptions, 'bosToken' | 'eosToken'>): Template {
  const template = parseChatTemplate(source);
  const failure = probeRender(template, PROBE_CONVERSATION, tokens);
  if (failure !== undefined && probeRender(template, PROBE_CONVERSATION.slice(1), tokens) !== undefined) {
    throw new KvfenceError(
      'invalid_model_file',
      `chat template fails on a system, user, assistant, user conversation: ${firstLine(failure)}`,
    );
  }
  return template;
}

/** Renders the probe; the message of the error the template threw, if any. Refuses a render slower than the bound. */
function probeRender(
  template: Template,
  messages: readonly ChatMessage[],
  tokens: Pick<ChatTemplateOptions, 'bosToken' | 'eosToken'>,
): string | undefined {
  const started = performance.now();
  let failure: string | undefined;
  try {
    template.render(templateVariables(messages, { addGenerationPrompt: true, ...tokens }));
  } catch (error) {
    failure = errorMessage(error);
  }
  const ms = performance.now() - started;
  if (ms > CHAT_TEMPLATE_PROBE_MS_MAX) {
    throw new KvfenceError(
      'invalid_model_file',
      `chat template took ${ms.toFixed(0)} ms to render a ${messages.length}-message conversation, over the ` +
        `${CHAT_TEMPLATE_PROBE_MS_MAX} ms allowed: it would take that long on the event loop for every chat request`,
    );
  }
  return failure;
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0];
}
