/**
 * Renders a model's chat template (tokenizer.chat_template, Jinja) into a prompt with @huggingface/jinja, the
 * implementation transformers.js uses. A template that does not parse is the model file's fault; one that fails while
 * rendering (raise_exception on alternating roles, a missing field) is answered as a bad request.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
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
 * Templates render for every chat request (on the gateway's event loop for a small conversation, on the tokenizer
 * thread for a long one), and nothing bounds a render's time or memory there: so a server renders the model's template
 * once at load and refuses one slower than this on a four-message conversation. Real templates (ChatML, Llama 2/3,
 * Gemma, Qwen, Mistral, Phi-3) take well under a millisecond; `{% for i in range(1000000) %}` took 4 s, on every
 * request.
 */
export const CHAT_TEMPLATE_PROBE_MS_MAX = 250;
/**
 * The probe renders in a process of its own (chat-template-probe-main.ts), which is killed past this or past
 * PROBE_HEAP_MB: a template that loops for hours, or allocates until V8 aborts the process, is refused at load
 * instead of hanging or ending the server. The time is the process's whole life, node's start included.
 */
const CHAT_TEMPLATE_PROBE_PROCESS_MS = 10_000;
const PROBE_HEAP_MB = 256;
const PROBE_CONVERSATION: readonly ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Hello!' },
  { role: 'assistant', content: 'Hi. How can I help?' },
  { role: 'user', content: 'Tell me a joke.' },
];

type TemplateTokens = Pick<ChatTemplateOptions, 'bosToken' | 'eosToken'>;

/** How the probe went: the error of its last render, if it failed, and how long each render took (ms). */
export interface ProbeOutcome {
  failure: string | undefined;
  renders: { messages: number; ms: number }[];
}

/**
 * Parses a model's template for serving and renders it once on a small conversation, in a process of its own: one
 * that fails there, takes longer than CHAT_TEMPLATE_PROBE_MS_MAX, or does not finish (time, memory) is refused as a
 * bad model file. A template may refuse a system turn with its own raise_exception (Mistral's, Gemma 2's): one that
 * fails with it is probed again without it.
 */
export function loadChatTemplate(
  source: string,
  tokens: TemplateTokens,
  processMs = CHAT_TEMPLATE_PROBE_PROCESS_MS,
): Template {
  const template = parseChatTemplate(source);
  const outcome = probeInProcess(source, tokens, processMs);
  for (const { messages, ms } of outcome.renders)
    if (ms > CHAT_TEMPLATE_PROBE_MS_MAX)
      throw new KvfenceError(
        'invalid_model_file',
        `chat template took ${ms.toFixed(0)} ms to render a ${messages}-message conversation, over the ` +
          `${CHAT_TEMPLATE_PROBE_MS_MAX} ms allowed: it would take that long for every chat request`,
      );
  if (outcome.failure !== undefined)
    throw new KvfenceError(
      'invalid_model_file',
      `chat template fails on a system, user, assistant, user conversation: ${firstLine(outcome.failure)}`,
    );
  return template;
}

/** The probe itself, as its process runs it: the conversation, then (if that failed) without its system turn. */
export function probeTemplate(source: string, tokens: TemplateTokens): ProbeOutcome {
  const template = parseChatTemplate(source);
  const renders: ProbeOutcome['renders'] = [];
  let failure: string | undefined;
  for (const messages of [PROBE_CONVERSATION, PROBE_CONVERSATION.slice(1)]) {
    const started = performance.now();
    failure = undefined;
    try {
      template.render(templateVariables(messages, { addGenerationPrompt: true, ...tokens }));
    } catch (error) {
      failure = errorMessage(error);
    }
    renders.push({ messages: messages.length, ms: performance.now() - started });
    if (failure === undefined) break;
  }
  return { failure, renders };
}

function probeInProcess(source: string, tokens: TemplateTokens, processMs: number): ProbeOutcome {
  const script = fileURLToPath(new URL('./chat-template-probe-main.js', import.meta.url));
  const r = spawnSync(process.execPath, [`--max-old-space-size=${PROBE_HEAP_MB}`, script], {
    input: JSON.stringify({ source, tokens }),
    timeout: processMs,
    killSignal: 'SIGKILL',
    maxBuffer: 1 << 20,
    encoding: 'utf8',
  });
  const refuse = (what: string) => new KvfenceError('invalid_model_file', `chat template ${what}`);
  if (r.error !== undefined && (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT')
    throw refuse(`did not finish rendering a 4-message conversation within ${processMs} ms`);
  if (r.error !== undefined) throw new KvfenceError('internal_error', `the chat template probe: ${r.error.message}`);
  if (r.status !== 0) {
    const said = r.stderr.split('\n').find((line) => /error/i.test(line)) ?? `exit ${r.status ?? r.signal}`;
    throw refuse(`could not render a 4-message conversation within ${PROBE_HEAP_MB} MB: ${said.trim()}`);
  }
  return JSON.parse(r.stdout) as ProbeOutcome;
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0];
}
