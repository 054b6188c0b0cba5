/**
 * The one place where error codes become HTTP statuses and OpenAI-shaped bodies:
 *   { "error": { "message": ..., "type": ..., "param": ..., "code": ... } }
 * A Record over every ErrorCode, so adding a code without deciding its status does not compile.
 */
import { clientText, type ErrorCode, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

interface ErrorMapping {
  status: number;
  type: string;
}

const ERROR_MAPPING: Record<ErrorCode, ErrorMapping> = {
  invalid_request_error: { status: 400, type: 'invalid_request_error' },
  invalid_argument: { status: 400, type: 'invalid_request_error' },
  context_length_exceeded: { status: 400, type: 'invalid_request_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  model_not_found: { status: 404, type: 'invalid_request_error' },
  not_found: { status: 404, type: 'invalid_request_error' },
  request_cancelled: { status: 499, type: 'invalid_request_error' },
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  kv_isolation_violation: { status: 500, type: 'server_error' },
  internal_error: { status: 500, type: 'server_error' },
  kv_transfer_failed: { status: 500, type: 'server_error' },
  invalid_model_file: { status: 500, type: 'server_error' },
  unsupported_model: { status: 500, type: 'server_error' },
  file_not_found: { status: 500, type: 'server_error' },
  kv_capacity_exceeded: { status: 503, type: 'server_error' },
  server_overloaded: { status: 503, type: 'server_error' },
  worker_unavailable: { status: 503, type: 'server_error' },
};

export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

export interface HttpError {
  status: number;
  body: OpenAiErrorBody;
  /** seconds, for 503s and 429s */
  retryAfterS: number | undefined;
}

/** the longest message and param a reply (and its log line) carries: a message quoting client text is cut there too */
const MESSAGE_CHARS_MAX = 2048;
const PARAM_CHARS_MAX = 256;

export function httpErrorOf(error: unknown, retryAfterS = 1): HttpError {
  const e = error instanceof KvfenceError ? error : new KvfenceError('internal_error', 'internal server error');
  const mapping = ERROR_MAPPING[e.code];
  const message = clientText(e.message, MESSAGE_CHARS_MAX);
  const param = e.param === undefined ? null : clientText(e.param, PARAM_CHARS_MAX);
  return {
    status: mapping.status,
    body: { error: { message, type: mapping.type, param, code: e.code } },
    retryAfterS: mapping.status === 503 || mapping.status === 429 ? retryAfterS : undefined,
  };
}

export function statusOf(code: ErrorCode): number {
  return ERROR_MAPPING[code].status;
}

/**
 * 413 for a body over the limit derived from the served context (body-limit.ts). Not an ErrorCode: no other layer
 * raises it, and its message must name the limit, which only the gateway knows.
 */
export function bodyTooLargeError(limitBytes: number, context: number): HttpError {
  return {
    status: 413,
    body: {
      error: {
        message:
          `The request body is larger than ${limitBytes} bytes, this server's request body limit: the most a ` +
          `request whose prompt fits its ${context}-token context can need (at most ${LIMITS.requestBodyBytesMax} ` +
          'bytes). Send a shorter prompt.',
        type: 'invalid_request_error',
        param: null,
        code: 'request_too_large',
      },
    },
    retryAfterS: undefined,
  };
}
