/**
 * vLLM's POST /tokenize and POST /detokenize, authenticated like /v1:
 *   /tokenize    {prompt, add_special_tokens = true} or {messages, add_generation_prompt = true, tools?} (through
 *                the chat template, as /v1/chat/completions renders it) → {count, max_model_len, tokens[, token_strs]}
 *   /detokenize  {tokens} → {prompt}
 * The body limit and the message count bound the work, and /detokenize takes at most the context's worth of ids; token
 * ids outside the vocabulary are a 400.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { KvfenceError } from '../util/errors.js';
import { parseMessages } from './schemas.js';
import { encodeClientText, promptTokens, type ServedModel } from './served-model.js';
import { tokenPiece } from './text-stream.js';
import { parseToolRequest } from './tool-request.js';

type Body = Record<string, unknown>;

const TOKENIZE_FIELDS = new Set([
  'model',
  'prompt',
  'messages',
  'add_special_tokens',
  'add_generation_prompt',
  'tools',
  'return_token_strs',
]);

function bad(message: string, param: string): KvfenceError {
  return new KvfenceError('invalid_request_error', message, param);
}

function bodyOf(raw: unknown, fields: ReadonlySet<string>, model: ServedModel): Body {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw bad('the request body must be a JSON object', 'body');
  const body = raw as Body;
  for (const key of Object.keys(body))
    if (!fields.has(key)) throw bad(`Unrecognized request argument supplied: ${key}`, key);
  const name = body['model'];
  if (name !== undefined && name !== null && name !== model.id)
    throw new KvfenceError('model_not_found', `The model '${String(name)}' does not exist`, 'model');
  return body;
}

function flag(body: Body, field: string, fallback: boolean): boolean {
  const v = body[field] ?? fallback;
  if (typeof v !== 'boolean') throw bad(`${field} must be a boolean`, field);
  return v;
}

export function registerTokenizeRoutes(
  app: FastifyInstance,
  model: ServedModel,
  provenContext: () => number,
  authenticate: (request: FastifyRequest) => string,
): void {
  const { tokenizer } = model;
  app.post('/tokenize', async (request) => {
    const tenant = authenticate(request);
    const body = bodyOf(request.body, TOKENIZE_FIELDS, model);
    let tokens: number[];
    if (body['messages'] !== undefined) {
      if (body['prompt'] !== undefined) throw bad('give prompt or messages, not both', 'prompt');
      if (!flag(body, 'add_generation_prompt', true))
        throw bad('add_generation_prompt false is not supported', 'add_generation_prompt');
      const tools = parseToolRequest({ tools: body['tools'] ?? undefined });
      const messages = parseMessages(body['messages']);
      tokens = await promptTokens(
        model,
        { kind: 'messages', messages },
        provenContext(),
        tenant,
        tools?.tools.map((t) => t.definition),
      );
    } else {
      const prompt = body['prompt'];
      if (typeof prompt !== 'string') throw bad('prompt must be a string', 'prompt');
      if (body['tools'] !== undefined) throw bad('tools need messages', 'tools');
      const options = { addSpecial: flag(body, 'add_special_tokens', true), parseSpecial: false };
      tokens = await encodeClientText(model, prompt, options, provenContext(), 'prompt', tenant);
    }
    return {
      count: tokens.length,
      max_model_len: provenContext(),
      tokens,
      ...(flag(body, 'return_token_strs', false)
        ? { token_strs: tokens.map((t) => tokenPiece(tokenizer, t).text) }
        : {}),
    };
  });
  app.post('/detokenize', async (request) => {
    authenticate(request);
    const body = bodyOf(request.body, new Set(['model', 'tokens']), model);
    const tokens = body['tokens'];
    if (!Array.isArray(tokens)) throw bad('tokens must be an array of token ids of the vocabulary', 'tokens');
    // no more than a request can hold: decoding runs on the event loop, and 280k ids from two connections held
    // every tenant's streams for ~0.4 s each time (LIMITS.contextTokensMax, 4M, was the bound)
    if (tokens.length > provenContext())
      throw bad(`tokens holds ${tokens.length} ids, more than the ${provenContext()}-token context`, 'tokens');
    if (!tokens.every((t) => Number.isInteger(t) && t >= 0 && t < model.vocabSize))
      throw bad('tokens must be an array of token ids of the vocabulary', 'tokens');
    return { prompt: tokenizer.decode(tokens as number[]) };
  });
}
