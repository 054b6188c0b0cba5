/** The bodies of vLLM's POST /tokenize and POST /detokenize, validated (tokenize-routes.ts serves them). */

import type { ChatMessage } from '../model/chat-template.js';
import { KvfenceError } from '../util/errors.js';
import type { BodyModel } from './body-readers.js';
import { asBody, parseMessages } from './schemas.js';
import { parseToolRequest } from './tool-request.js';

type Body = Record<string, unknown>;

const TOKENIZE_FIELDS = [
  'model',
  'prompt',
  'messages',
  'add_special_tokens',
  'add_generation_prompt',
  'tools',
  'return_token_strs',
];

/** `returnTokenStrs` undefined: not a boolean, refused after the prompt is tokenized (as its errors come first) */
export type TokenizeBody = (
  | { kind: 'messages'; messages: ChatMessage[]; tools: unknown[] | undefined }
  | { kind: 'prompt'; prompt: string; addSpecial: boolean }
) & { returnTokenStrs: boolean | undefined };

/** The ids to decode, or (`tokens` undefined) how many there were when some are not ids of the vocabulary. */
export interface DetokenizeBody {
  count: number;
  tokens: number[] | undefined;
}

function bad(message: string, param: string): KvfenceError {
  return new KvfenceError('invalid_request_error', message, param);
}

/** The body of a route that takes `fields`, for the served model (any other is a 404 naming it). */
function bodyOf(raw: unknown, fields: readonly string[], modelId: string): Body {
  const body = asBody(raw, fields);
  const name = body['model'];
  if (name !== undefined && name !== null && name !== modelId)
    throw new KvfenceError('model_not_found', `The model '${String(name)}' does not exist`, 'model');
  return body;
}

function flag(body: Body, field: string, fallback: boolean): boolean {
  const v = body[field] ?? fallback;
  if (typeof v !== 'boolean') throw bad(`${field} must be a boolean`, field);
  return v;
}

export function readTokenizeBody(raw: unknown, modelId: string): TokenizeBody {
  const body = bodyOf(raw, TOKENIZE_FIELDS, modelId);
  const strs = body['return_token_strs'] ?? false;
  const returnTokenStrs = typeof strs === 'boolean' ? strs : undefined;
  if (body['messages'] !== undefined) {
    if (body['prompt'] !== undefined) throw bad('give prompt or messages, not both', 'prompt');
    if (!flag(body, 'add_generation_prompt', true))
      throw bad('add_generation_prompt false is not supported', 'add_generation_prompt');
    const tools = parseToolRequest({ tools: body['tools'] ?? undefined });
    const messages = parseMessages(body['messages']);
    return { kind: 'messages', messages, tools: tools?.tools.map((t) => t.definition), returnTokenStrs };
  }
  const prompt = body['prompt'];
  if (typeof prompt !== 'string') throw bad('prompt must be a string', 'prompt');
  if (body['tools'] !== undefined) throw bad('tools need messages', 'tools');
  return { kind: 'prompt', prompt, addSpecial: flag(body, 'add_special_tokens', true), returnTokenStrs };
}

export const NOT_TOKEN_IDS = 'tokens must be an array of token ids of the vocabulary';

/** The ids to decode; the context bound, checked first, is the route's (it may change with the workers). */
export function readDetokenizeBody(raw: unknown, model: BodyModel): DetokenizeBody {
  const tokens = bodyOf(raw, ['model', 'tokens'], model.id)['tokens'];
  if (!Array.isArray(tokens)) throw bad(NOT_TOKEN_IDS, 'tokens');
  const ids = tokens.every((t) => Number.isInteger(t) && t >= 0 && t < model.vocabSize);
  return { count: tokens.length, tokens: ids ? (tokens as number[]) : undefined };
}
