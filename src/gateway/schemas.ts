/**
 * OpenAI request bodies → one validated, typed request. Supported options are read; options kvfence does not support
 * (n > 1, suffix, echo with logprobs, ...) are a 400 naming the parameter, never silently ignored; unknown fields are
 * a 400 too, as OpenAI answers them. vLLM's sampling extras are accepted under their vLLM names.
 */
import type { ChatMessage, ChatToolCall } from '../model/chat-template.js';
import {
  type ConstrainedOutput,
  checkSchemaSize,
  type GrammarCheck,
  type OutputConstraint,
  SCHEMA_PARAM,
} from '../structured/grammar-cache.js';
import { checkJsonDepth } from '../structured/json-schema.js';
import { clientText, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { parseSamplingOptions, SAMPLING_FIELDS, type SamplingOptions } from './request-options.js';
import { parseToolRequest, type ToolRequest, toolConstraint } from './tool-request.js';

export type PromptInput =
  | { kind: 'messages'; messages: ChatMessage[] }
  | { kind: 'text'; text: string }
  | { kind: 'tokens'; tokens: number[] };

export interface ParsedRequest {
  endpoint: 'chat' | 'completion';
  model: string;
  prompt: PromptInput;
  /** undefined: until the context is full (chat) */
  maxTokens: number | undefined;
  temperature: number;
  topP: number;
  seed: number | undefined;
  stop: string[];
  /** chat: logprobs true; completions: logprobs given (0..5) */
  logprobs: boolean;
  topLogprobs: number;
  stream: boolean;
  includeUsage: boolean;
  /** penalties, logit_bias and vLLM's extras */
  sampling: SamplingOptions;
  /** what the output must be: response_format, or the arguments of a forced tool call */
  constraint: OutputConstraint | undefined;
  /** the grammar builds that check it, for the tokenizer thread (checkGrammars: seconds of work, off the event loop) */
  grammarChecks: readonly GrammarCheck[];
  /** chat: the tools and the tool choice */
  tools: ToolRequest | undefined;
  /** completions: the prompt's text comes first in the output */
  echo: boolean;
  /** answers drawn from the one prompt (sharing its KV pages) */
  n: number;
}

type Body = Record<string, unknown>;

const COMMON_FIELDS = [
  'model',
  'stream',
  'stream_options',
  'max_tokens',
  'temperature',
  'top_p',
  'seed',
  'stop',
  'n',
  'user',
  'response_format',
  ...SAMPLING_FIELDS,
];
const CHAT_FIELDS = [
  ...COMMON_FIELDS,
  'messages',
  'max_completion_tokens',
  'logprobs',
  'top_logprobs',
  'tools',
  'tool_choice',
  'functions',
  'function_call',
  'parallel_tool_calls',
];
const COMPLETION_FIELDS = [...COMMON_FIELDS, 'prompt', 'logprobs', 'echo', 'suffix', 'best_of'];

function bad(message: string, param: string): KvfenceError {
  return new KvfenceError('invalid_request_error', message, param);
}

function unsupported(param: string, what: string): KvfenceError {
  return bad(`${param}: ${what} is not supported by this server`, param);
}

export function parseChatRequest(raw: unknown, vocabSize: number): ParsedRequest {
  const body = asBody(raw, CHAT_FIELDS);
  for (const field of ['functions', 'function_call'] as const) {
    if (body[field] !== undefined && body[field] !== null)
      throw unsupported(field, `the deprecated ${field} (use tools and tool_choice)`);
  }
  const tools = parseToolRequest(body);
  const format = parseResponseFormat(body['response_format']);
  const forced = tools !== undefined ? toolConstraint(tools) : undefined;
  if (format !== undefined && tools !== undefined && tools.choice.kind !== 'none')
    throw bad('response_format cannot be combined with tools unless tool_choice is none', 'response_format');
  const logprobs = optional(body, 'logprobs', isBoolean, 'a boolean') ?? false;
  const topLogprobs =
    optional(body, 'top_logprobs', isInt(0, LIMITS.topLogprobsMax), `an integer from 0 to ${LIMITS.topLogprobsMax}`) ??
    0;
  if (topLogprobs > 0 && !logprobs) throw bad('top_logprobs requires logprobs: true', 'top_logprobs');
  const maxTokens = optional(body, 'max_tokens', isInt(1, LIMITS.generateTokensMax), TOKEN_COUNT);
  const maxCompletionTokens = optional(body, 'max_completion_tokens', isInt(1, LIMITS.generateTokensMax), TOKEN_COUNT);
  return {
    endpoint: 'chat',
    ...common(body, vocabSize, forced ?? format),
    prompt: { kind: 'messages', messages: parseMessages(body['messages']) },
    maxTokens: maxCompletionTokens ?? maxTokens,
    logprobs,
    topLogprobs,
    tools,
    echo: false,
  };
}

export function parseCompletionRequest(raw: unknown, vocabSize: number): ParsedRequest {
  const body = asBody(raw, COMPLETION_FIELDS);
  const echo = optional(body, 'echo', isBoolean, 'a boolean') ?? false;
  if (body['suffix'] !== undefined && body['suffix'] !== null) throw unsupported('suffix', 'insertion');
  const bestOf = body['best_of'];
  if (bestOf !== undefined && bestOf !== null && bestOf !== 1) throw unsupported('best_of', 'best_of other than 1');
  const logprobs = optional(
    body,
    'logprobs',
    isInt(0, LIMITS.completionLogprobsMax),
    `an integer from 0 to ${LIMITS.completionLogprobsMax}`,
  );
  if (echo && logprobs !== undefined) throw unsupported('echo', "echo with logprobs (the prompt's own logprobs)");
  return {
    endpoint: 'completion',
    ...common(body, vocabSize, parseResponseFormat(body['response_format'])),
    prompt: parsePrompt(body['prompt']),
    // OpenAI's legacy default
    maxTokens: optional(body, 'max_tokens', isInt(1, LIMITS.generateTokensMax), TOKEN_COUNT) ?? 16,
    logprobs: logprobs !== undefined,
    topLogprobs: logprobs ?? 0,
    tools: undefined,
    echo,
  };
}

/**
 * response_format: text (nothing to enforce), json_object, or json_schema, whose schema's size is checked now and its
 * grammar built later, off the event loop (a 400 naming the keyword either way).
 */
function parseResponseFormat(value: unknown): ConstrainedOutput | undefined {
  if (value === undefined || value === null) return undefined;
  const param = 'response_format';
  if (!isBody(value)) throw bad('response_format must be an object', param);
  switch (value['type']) {
    case 'text':
      return undefined;
    case 'json_object':
      return { constraint: { kind: 'json_object' }, checks: [] };
    case 'json_schema': {
      const spec = value['json_schema'];
      if (!isBody(spec) || !isBody(spec['schema']))
        throw bad('response_format.json_schema must be {"name": …, "schema": {…}}', 'response_format.json_schema');
      const constraint: OutputConstraint = { kind: 'json_schema', schema: spec['schema'] };
      checkSchemaSize(constraint.schema, SCHEMA_PARAM);
      return { constraint, checks: [{ constraint, param: SCHEMA_PARAM }] };
    }
    default:
      throw bad('response_format.type must be text, json_object or json_schema', 'response_format.type');
  }
}

function common(
  body: Body,
  vocabSize: number,
  output: ConstrainedOutput | undefined,
): Pick<
  ParsedRequest,
  | 'model'
  | 'temperature'
  | 'topP'
  | 'seed'
  | 'stop'
  | 'stream'
  | 'includeUsage'
  | 'sampling'
  | 'constraint'
  | 'grammarChecks'
  | 'n'
> {
  const model = body['model'];
  if (typeof model !== 'string' || model === '') throw bad('model is required', 'model');
  const stream = optional(body, 'stream', isBoolean, 'a boolean') ?? false;
  const options = body['stream_options'];
  let includeUsage = false;
  if (options !== undefined && options !== null) {
    if (!stream) throw bad('stream_options is only allowed with stream: true', 'stream_options');
    if (!isBody(options)) throw bad('stream_options must be an object', 'stream_options');
    const include = options['include_usage'];
    if (include !== undefined && include !== null && typeof include !== 'boolean')
      throw bad('stream_options.include_usage must be a boolean', 'stream_options.include_usage');
    includeUsage = include === true;
  }
  const temperature = optional(body, 'temperature', isNumberIn(0, 2), 'a number from 0 to 2') ?? 1;
  const topP =
    optional(body, 'top_p', (v): v is number => typeof v === 'number' && v > 0 && v <= 1, 'a number in (0, 1]') ?? 1;
  const seed = optional(body, 'seed', isInt(-(2 ** 53), 2 ** 53), 'an integer');
  optional(body, 'user', (v): v is string => typeof v === 'string', 'a string'); // accepted (OpenAI's), not used
  const stop = parseStop(body['stop']);
  // a stop sequence could cut the document short and still report "stop": never a silently invalid answer
  if (output !== undefined && stop.length > 0)
    throw bad('stop sequences cannot be combined with response_format or a forced tool call', 'stop');
  const sampling = parseSamplingOptions(body, vocabSize);
  // the same for stop tokens: one the document's grammar allows as text would end it, unfinished, as "stop"
  if (output !== undefined && sampling.stopTokenIds.length > 0)
    throw bad('stop_token_ids cannot be combined with response_format or a forced tool call', 'stop_token_ids');
  return {
    model,
    temperature,
    topP,
    seed: seed === undefined ? undefined : seed >>> 0,
    stop,
    stream,
    includeUsage,
    sampling,
    constraint: output?.constraint,
    grammarChecks: output?.checks ?? [],
    n: optional(body, 'n', isInt(1, LIMITS.choicesMax), `an integer from 1 to ${LIMITS.choicesMax}`) ?? 1,
  };
}

export function parseMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw bad('messages must be a non-empty array', 'messages');
  if (value.length > LIMITS.chatMessagesMax) throw bad(`at most ${LIMITS.chatMessagesMax} messages`, 'messages');
  const argumentNodes = { left: HISTORY_ARGUMENT_NODES_MAX };
  return value.map((m: unknown, i: number) => {
    const param = `messages[${i}]`;
    if (!isBody(m)) throw bad(`${param} must be an object`, param);
    const role = m['role'] === 'developer' ? 'system' : m['role'];
    switch (role) {
      case 'system':
      case 'user':
        return { role, content: messageText(m['content'], `${param}.content`) };
      case 'assistant': {
        const calls = m['tool_calls'] ?? undefined;
        if (calls === undefined) return { role, content: messageText(m['content'], `${param}.content`) };
        const content = m['content'] ?? '';
        return {
          role,
          content: messageText(content, `${param}.content`),
          tool_calls: parseHistoryCalls(calls, `${param}.tool_calls`, argumentNodes),
        };
      }
      case 'tool': {
        const id = m['tool_call_id'];
        if (typeof id !== 'string' || id === '')
          throw bad(`${param}.tool_call_id is required`, `${param}.tool_call_id`);
        return { role, content: messageText(m['content'], `${param}.content`), tool_call_id: id };
      }
      default:
        throw bad(`${param}.role must be system, developer, user, assistant or tool`, `${param}.role`);
    }
  });
}

/**
 * The objects and arrays all the history's tool-call arguments may hold: parsed, they are an object graph the body
 * thread posts back (~1 µs an object on the event loop); 490k of them held it ~0.2 s.
 */
const HISTORY_ARGUMENT_NODES_MAX = 4 * LIMITS.schemaNodesMax;

/** An assistant turn's tool calls; their arguments (JSON text on the wire) go to the template parsed. */
function parseHistoryCalls(value: unknown, param: string, nodes: { left: number }): ChatToolCall[] {
  if (!Array.isArray(value) || value.length > LIMITS.toolsMax)
    throw bad(`${param} must be an array of at most ${LIMITS.toolsMax} calls`, param);
  return value.map((c: unknown, i) => {
    const at = `${param}[${i}]`;
    const fn = isBody(c) ? c['function'] : undefined;
    if (!isBody(c) || typeof c['id'] !== 'string' || !isBody(fn) || typeof fn['name'] !== 'string')
      throw bad(`${at} must be {"id", "type": "function", "function": {"name", "arguments"}}`, at);
    const text = fn['arguments'];
    let args: unknown;
    try {
      args = typeof text === 'string' ? JSON.parse(text) : undefined;
    } catch {
      args = undefined;
    }
    if (!isBody(args))
      throw bad(`${at}.function.arguments must be a JSON object as a string`, `${at}.function.arguments`);
    nodes.left -= checkJsonDepth(args, `${at}.function.arguments`);
    if (nodes.left < 0)
      throw bad(
        `the tool calls' arguments in messages hold more than ${HISTORY_ARGUMENT_NODES_MAX} objects and arrays`,
        `${at}.function.arguments`,
      );
    return { id: c['id'], type: 'function', function: { name: fn['name'], arguments: args } };
  });
}

function messageText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(`${param} must be a string or an array of text parts`, param);
  return content
    .map((part: unknown, i: number) => {
      if (!isBody(part) || part['type'] !== 'text' || typeof part['text'] !== 'string') {
        throw bad(`${param}[${i}]: only text parts are supported`, `${param}[${i}]`);
      }
      return part['text'];
    })
    .join('');
}

/** OpenAI's forms: a string, token ids, or a batch of one of either (one level of array around it, no deeper). */
function parsePrompt(value: unknown, inBatch = false): PromptInput {
  if (typeof value === 'string') return { kind: 'text', text: value };
  if (Array.isArray(value)) {
    if (!inBatch && value.length === 1 && (typeof value[0] === 'string' || Array.isArray(value[0])))
      return parsePrompt(value[0], true);
    if (value.length > 0 && value.every((t) => Number.isInteger(t)))
      return { kind: 'tokens', tokens: value as number[] };
    if (value.length > 1 && value.every((t) => typeof t === 'string' || Array.isArray(t)))
      throw unsupported('prompt', 'more than one prompt per request');
  }
  throw bad('prompt must be a string or an array of token ids', 'prompt');
}

function parseStop(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  const stops = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(stops) || stops.length > LIMITS.stopSequencesMax)
    throw bad(`stop must be a string or up to ${LIMITS.stopSequencesMax} strings`, 'stop');
  return stops.map((s: unknown) => {
    if (typeof s !== 'string' || s === '' || s.length > LIMITS.stopSequenceCharsMax) {
      throw bad(
        `each stop sequence must be a non-empty string of at most ${LIMITS.stopSequenceCharsMax} characters`,
        'stop',
      );
    }
    return s;
  });
}

/** `raw` as a request body whose every field is one of `fields` (else the 400 naming the first that is not) */
export function asBody(raw: unknown, fields: readonly string[]): Body {
  if (!isBody(raw)) throw bad('the request body must be a JSON object', 'body');
  for (const key of Object.keys(raw))
    if (!fields.includes(key)) throw bad(`Unrecognized request argument supplied: ${clientText(key)}`, clientText(key));
  return raw;
}

/** What max_tokens and max_completion_tokens must be (one over the bound is no "positive integer" error) */
const TOKEN_COUNT = `an integer from 1 to ${LIMITS.generateTokensMax}`;

function optional<T>(body: Body, field: string, is: (v: unknown) => v is T, what: string): T | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!is(v)) throw bad(`${field} must be ${what}`, field);
  return v;
}

function isBody(value: unknown): value is Body {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isBoolean(v: unknown): v is boolean {
  return typeof v === 'boolean';
}

function isInt(min: number, max: number) {
  return (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
}

function isNumberIn(min: number, max: number) {
  return (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max;
}
