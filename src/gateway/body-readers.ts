/**
 * What each JSON route reads from its body, where the body is parsed (json-body.ts: inline when small, else on the
 * body thread). A large body's whole object graph coming back from the thread cost the event loop ~1 µs an object:
 * 470k empty objects under a field no route reads held every stream for 0.25–0.5 s before the route refused them
 * (DESIGN I11). Read where it is parsed, only the validated request comes back, bounded by the API's own limits
 * (messages, tools, schema nodes); a body the route refuses is refused there.
 */
import { KvfenceError } from '../util/errors.js';
import { type ParsedRequest, parseChatRequest, parseCompletionRequest } from './schemas.js';
import { readDetokenizeBody, readTokenizeBody, type TokenizeBody } from './tokenize-body.js';

/** What the readers need to know of the served model */
export interface BodyModel {
  id: string;
  vocabSize: number;
}

interface Bodies {
  chat: ParsedRequest;
  completion: ParsedRequest;
  tokenize: TokenizeBody;
  detokenize: number[];
}

export type BodyReader = keyof Bodies;

/** A route's body as read: its reader names what it holds (it crosses threads, so no class marks it) */
export interface ReadBody<K extends BodyReader = BodyReader> {
  reader: K;
  value: Bodies[K];
}

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

/** `raw` read by `reader` (a 400 KvfenceError naming the field at fault when the route refuses it). */
export function readBody(reader: BodyReader, raw: unknown, model: BodyModel): ReadBody {
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
}

/**
 * The route's own body: what its reader read. A body parsed otherwise (`text/plain` reaches a route as a string) is
 * the 400 a body that is not a JSON object gets.
 */
export function bodyAs<K extends BodyReader>(body: unknown, reader: K): Bodies[K] {
  const read = body as Partial<ReadBody> | undefined;
  if (typeof body !== 'object' || read?.reader !== reader)
    throw new KvfenceError('invalid_request_error', 'the request body must be a JSON object', 'body');
  return read.value as Bodies[K];
}
