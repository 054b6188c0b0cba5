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

/** Every code, once: what a code read off the wire is checked against. */
const ERROR_CODES: Record<ErrorCode, true> = {
  invalid_request_error: true,
  invalid_model_file: true,
  file_not_found: true,
  unsupported_model: true,
  context_length_exceeded: true,
  kv_isolation_violation: true,
  kv_capacity_exceeded: true,
  invalid_argument: true,
  invalid_api_key: true,
  model_not_found: true,
  not_found: true,
  rate_limit_exceeded: true,
  server_overloaded: true,
  request_cancelled: true,
  internal_error: true,
  kv_transfer_failed: true,
  worker_unavailable: true,
};

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERROR_CODES, value);
}

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

/**
 * A client's own text as an error message or param quotes it: at most `max` characters, the rest counted. A request
 * may carry a 15 MB field name or model id; quoted whole, each refusal wrote it to the log and into the reply (the log
 * grew 1.5 GB in 45 s, and other tenants' streams waited on the event loop).
 */
export function clientText(text: string, max = 64): string {
  return text.length <= max ? text : `${text.slice(0, max)}…(${text.length} characters)`;
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** `error` itself when it is a KvfenceError, else one of `code` carrying its message (a bug or a library's error). */
export function asKvfenceError(error: unknown, code: ErrorCode = 'internal_error'): KvfenceError {
  return error instanceof KvfenceError ? error : new KvfenceError(code, errorMessage(error));
}

/**
 * A listen that failed for the address given (in use, not allowed, not this host's): the user's to fix, one line and
 * exit 1, as the gateway's and every worker's listeners say it; anything else stays the error it was.
 */
export function listenFailure(error: unknown, address: string): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL')
    return new KvfenceError('invalid_argument', `cannot listen on ${address} (${code})`);
  return error;
}

/**
 * The startup warning for a secret file (the cluster secret, the admin token) that users other than its owner and
 * group may read or write; undefined when none can. Group read is fine: Kubernetes mounts secrets 0440 for the pod's
 * fsGroup, and a warning on every pod start that no one can act on teaches operators to ignore warnings.
 */
export function exposedSecretFile(path: string, mode: number, what: string): string | undefined {
  if ((mode & 0o007) === 0) return undefined;
  return `${what} ${path} is open to every user (mode ${(mode & 0o777).toString(8)}); chmod o-rwx it`;
}
