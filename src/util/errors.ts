/**
 * Typed errors that reach users. Each carries an OpenAI-style `code`; the gateway maps codes to HTTP statuses in one
 * place. `KvfenceError` is for conditions a user can cause (bad input, bad file, limits); bugs are AssertionErrors.
 */
export type ErrorCode =
  | 'invalid_request_error'
  | 'invalid_model_file'
  | 'file_not_found'
  | 'unsupported_model'
  | 'context_length_exceeded'
  | 'kv_isolation_violation'
  | 'kv_capacity_exceeded'
  | 'invalid_argument'
  // serving
  | 'invalid_api_key'
  | 'model_not_found'
  | 'not_found'
  | 'rate_limit_exceeded'
  | 'server_overloaded'
  | 'request_cancelled'
  | 'internal_error'
  // KV transfer (prefill → decode)
  | 'kv_transfer_failed'
  // disaggregated serving: a prefill or decode worker died or cannot be reached
  | 'worker_unavailable';

export class KvfenceError extends Error {
  override name = 'KvfenceError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** the request field at fault, reported as OpenAI's `param` */
    readonly param?: string,
  ) {
    super(message);
  }
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
