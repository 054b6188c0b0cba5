/**
 * JSON request bodies, parsed off the event loop when large (DESIGN I11): decoding and parsing a megabyte takes the
 * event loop several milliseconds, so a tenant uploading large prompts in a loop would delay every other tenant's
 * streamed tokens by that much each time. A body of up to INLINE_BYTES is parsed inline (tens of microseconds); a
 * larger one is moved (not copied) to a worker thread that decodes and parses it, bounded as util/thread-calls.ts says,
 * and at most PER_TENANT_MAX of one tenant's at a time (more: 429), so a tenant uploading in a loop cannot fill the
 * thread's queue and turn other tenants' large requests into 503s.
 * The parse is fastify's own (secure-json-parse, refusing `__proto__` and `constructor.prototype` keys); a body that
 * is not JSON is a 400. The route's reader (body-readers.ts) reads it where it was parsed, so only what the route
 * uses comes back from the thread.
 */
import { Buffer } from 'node:buffer';
import secureJson from 'secure-json-parse';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { ThreadCalls } from '../util/thread-calls.js';
import { type BodyModel, type BodyReader, readBody, readerOf } from './body-readers.js';

const INLINE_BYTES = 64 * 1024;
const QUEUE_MAX = 32;
const PER_TENANT_MAX = 4;

/** The body's value; a body that is empty, not UTF-8 JSON or carrying prototype keys is a 400. */
export function parseJsonBody(body: Uint8Array): unknown {
  if (body.length === 0)
    throw new KvfenceError(
      'invalid_request_error',
      "Body cannot be empty when content-type is set to 'application/json'",
    );
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  try {
    return secureJson.parse(text, null, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    throw new KvfenceError('invalid_request_error', `Body is not valid JSON: ${errorMessage(error)}`);
  }
}

/** A body for the thread: its bytes, and the reader of its route (body-readers.ts) if it has one. */
export interface BodyCall {
  bytes: Uint8Array;
  reader: BodyReader | undefined;
}

/** The body's value as its route reads it (a ReadBody), or the parsed JSON for a route without a reader. */
export function readJsonBody(call: BodyCall, model: BodyModel): unknown {
  const value = parseJsonBody(call.bytes);
  return call.reader === undefined ? value : readBody(call.reader, value, model);
}

export class JsonBodyParser {
  private readonly calls: ThreadCalls<BodyCall, unknown>;

  constructor(
    timeoutMs: number,
    private readonly model: BodyModel,
  ) {
    this.calls = new ThreadCalls(
      new URL('./json-body-main.js', import.meta.url),
      model,
      {
        thread: 'the request body thread',
        busy: (n) => `${n} large request bodies are already being parsed`,
        callerBusy: (n) =>
          `${n} of your request bodies over ${INLINE_BYTES} bytes are already being parsed; ` +
          'send the next when one is answered',
        slow: (ms) => `parsing the request body took longer than ${ms} ms`,
      },
      timeoutMs,
      QUEUE_MAX,
      PER_TENANT_MAX,
    );
  }

  /**
   * `tenant`'s `body`'s value, read by `route`'s reader (readJsonBody); a large body is handed to the thread, so the
   * caller must not use it afterwards.
   */
  async parse(body: Buffer, tenant: string, route: string | undefined): Promise<unknown> {
    const reader = readerOf(route);
    if (body.length <= INLINE_BYTES) return readJsonBody({ bytes: body, reader }, this.model);
    // a body that owns its whole buffer moves to the thread; one sharing a pooled buffer is copied out first
    const bytes = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength ? body : new Uint8Array(body);
    return this.calls.call({ bytes, reader }, tenant, [bytes.buffer as ArrayBuffer]);
  }

  close(): Promise<void> {
    return this.calls.close();
  }
}
