/**
 * What each JSON route reads from its body, where the body is parsed (json-body.ts: inline when small, else on the
 * body thread). A large body's whole object graph coming back from the thread cost the event loop ~1 µs an object:
 * 470k empty objects under a field no route reads held every stream for 0.25–0.5 s before the route refused them
 * (DESIGN I11). Read where it is parsed, only the validated request comes back, bounded by the API's own limits
 * (messages, tools, schema nodes); a body the route refuses is refused there.
 */
import { type ErrorCode, KvfenceError } from '../util/errors.js';
import { type ParsedRequest, parseChatRequest, parseCompletionRequest } from './schemas.js';
import { type DetokenizeBody, readDetokenizeBody, readTokenizeBody, type TokenizeBody } from './tokenize-body.js';

/** What the readers need to know of the served model */
export interface BodyModel {
  id: string;
  vocabSize: number;
}

interface Bodies {
  chat: ParsedRequest;
  completion: ParsedRequest;
  tokenize: TokenizeBody;
  detokenize: DetokenizeBody;
}

export type BodyReader = keyof Bodies;

/**
 * A route's body as read: its reader names what it holds (it crosses threads, so no class marks it), or the route's
 * refusal, which its handler throws (thrown where the body is parsed, fastify would close the connection as for a
 * body that is not JSON)
 */
export type ReadBody =
  | { reader: BodyReader; value: Bodies[BodyReader] }
  | { reader: BodyReader; refused: { code: ErrorCode; message: string; param: string | undefined } };

const ROUTES: Record<string, BodyReader> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completion',
  '/tokenize': 'tokenize',
  '/detokenize': 'detokenize',
};

/** The reader of `route`'s body; undefined: the route takes the parsed JSON as it is. */
export function readerOf(route: string | undefined): BodyReader | undefined {
  return route === undefined ? undefined : ROUTES[route];
}

/** `raw` read by `reader`, or the route's refusal (a KvfenceError naming the field at fault). */
export function readBody(reader: BodyReader, raw: unknown, model: BodyModel): ReadBody {
  try {
    switch (reader) {
      case 'chat':
        return { reader, value: parseChatRequest(raw, model.vocabSize) };
      case 'completion':
        return { reader, value: parseCompletionRequest(raw, model.vocabSize) };
      case 'tokenize':
        return { reader, value: readTokenizeBody(raw, model.id) };
      case 'detokenize':
        return { reader, value: readDetokenizeBody(raw, model) };
    }
  } catch (error) {
    if (!(error instanceof KvfenceError)) throw error;
    return { reader, refused: { code: error.code, message: error.message, param: error.param } };
  }
}

/**
 * The route's own body: what its reader read. A body parsed otherwise (`text/plain` reaches a route as a string) is
 * the 400 a body that is not a JSON object gets.
 */
export function bodyAs<K extends BodyReader>(body: unknown, reader: K): Bodies[K] {
  const read = body as ReadBody | undefined;
  if (typeof body !== 'object' || read?.reader !== reader)
    throw new KvfenceError('invalid_request_error', 'the request body must be a JSON object', 'body');
  if ('refused' in read) throw new KvfenceError(read.refused.code, read.refused.message, read.refused.param);
  return read.value as Bodies[K];
}
