/**
 * Why a transfer failed. Every deviation from the protocol maps to one reason; the request fails closed with
 * `kv_transfer_failed` and its pages are scrubbed. Names match docs/protocol.md and spec/.
 */
import { isErrorCode, KvfenceError } from '../util/errors.js';

export const TRANSFER_FAILURE_REASONS = [
  // binding: the frame is not for this reservation
  'unknown_request',
  'wrong_request',
  'wrong_tenant',
  'wrong_nonce',
  'wrong_epoch',
  'ticket_mismatch',
  'duplicate_hello',
  // sequence
  'unexpected_frame',
  'page_out_of_range',
  'page_duplicate',
  'page_out_of_order',
  'page_missing',
  'page_token_mismatch',
  'page_size_mismatch',
  'checksum_mismatch',
  'commit_mismatch',
  'digest_mismatch',
  // framing and connection
  'malformed_frame',
  'frame_truncated',
  'frame_too_large',
  'connection_closed',
  'auth_failed',
  'mac_invalid',
  'backpressure_timeout',
  // lifetime
  'deadline_exceeded',
  'idle_timeout',
  'cancelled',
  'reservation_closed',
  'receiver_closed',
  'sender_aborted',
] as const;

export type TransferFailureReason = (typeof TRANSFER_FAILURE_REASONS)[number];

export function isTransferFailureReason(value: string): value is TransferFailureReason {
  return (TRANSFER_FAILURE_REASONS as readonly string[]).includes(value);
}

export class TransferError extends KvfenceError {
  override name = 'TransferError';
  constructor(
    readonly reason: TransferFailureReason,
    message: string,
    /** for `sender_aborted`: the code the prefill side gave (e.g. `context_length_exceeded`), so its status survives */
    readonly peerCode?: string,
  ) {
    super('kv_transfer_failed', `KV transfer failed (${reason}): ${message}`);
  }
}

/**
 * What a client may learn of a transfer failure: its reason, nothing more. Frame-level details (a replayed frame names
 * the request it came from, possibly another tenant's) stay in the worker's log.
 */
export function publicTransferError(error: KvfenceError): KvfenceError {
  if (!(error instanceof TransferError)) return error;
  return new KvfenceError(
    'kv_transfer_failed',
    `KV transfer failed (${error.reason}); the request's pages were scrubbed`,
  );
}

/**
 * How a failed transfer ends its request: a prefill's ABORT keeps its original code (a 400 stays a 400, DESIGN §6);
 * every other failure is a 500 kv_transfer_failed that names only the reason.
 */
export function transferEndError(error: TransferError): KvfenceError {
  const peer = error.peerCode;
  if (error.reason === 'sender_aborted' && peer !== undefined && isErrorCode(peer) && peer !== 'kv_transfer_failed') {
    return new KvfenceError(peer, error.message.replace(/^KV transfer failed \(sender_aborted\): /, ''));
  }
  return publicTransferError(error);
}
