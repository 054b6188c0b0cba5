/**
 * How a command ends on failure: a user-caused error prints one line and exits 1; anything else is a bug, printed as
 * one line too (set KVFENCE_DEBUG=1 for the stack) with exit 2. No input a user can give makes a stack trace.
 */
import { KvfenceError } from '../util/errors.js';

export function reportFailure(error: unknown): number {
  if (error instanceof KvfenceError) {
    process.stderr.write(`kvfence: ${error.message}\n`);
    return 1;
  }
  const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  process.stderr.write(`kvfence: internal error: ${detail}\n`);
  if (process.env['KVFENCE_DEBUG'] === '1' && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  return 2;
}
