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
import { bodyAs } from './body-readers.js';
import { encodeClientText, promptTokens, type ServedModel } from './served-model.js';
import { NOT_TOKEN_IDS } from './tokenize-body.js';

export function registerTokenizeRoutes(
  app: FastifyInstance,
  model: ServedModel,
  provenContext: () => number,
  authenticate: (request: FastifyRequest) => string,
): void {
  app.post('/tokenize', async (request) => {
    const tenant = authenticate(request);
    const body = bodyAs(request.body, 'tokenize');
    const tokens =
      body.kind === 'messages'
        ? await promptTokens(model, { kind: 'messages', messages: body.messages }, provenContext(), tenant, body.tools)
        : await encodeClientText(
            model,
            body.prompt,
            { addSpecial: body.addSpecial, parseSpecial: false },
            provenContext(),
            'prompt',
            tenant,
          );
    if (body.returnTokenStrs === undefined)
      throw new KvfenceError('invalid_request_error', 'return_token_strs must be a boolean', 'return_token_strs');
    return {
      count: tokens.length,
      max_model_len: provenContext(),
      tokens,
      ...(body.returnTokenStrs ? { token_strs: await model.encoder.pieceTexts(tokens, tenant) } : {}),
    };
  });
  app.post('/detokenize', async (request) => {
    const tenant = authenticate(request);
    const { count, tokens } = bodyAs(request.body, 'detokenize');
    // no more than a request can hold: 280k ids from two connections held every tenant's streams for ~0.4 s each
    // time when decoding ran on the event loop (LIMITS.contextTokensMax, 4M, was the bound); it runs on a tokenizer
    // thread past INLINE_IDS
    if (count > provenContext())
      throw new KvfenceError(
        'invalid_request_error',
        `tokens holds ${count} ids, more than the ${provenContext()}-token context`,
        'tokens',
      );
    if (tokens === undefined) throw new KvfenceError('invalid_request_error', NOT_TOKEN_IDS, 'tokens');
    return { prompt: await model.encoder.decode(tokens, tenant) };
  });
}
