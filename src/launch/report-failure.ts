/**
 * How a command ends on failure: a user-caused error prints one line and exits 1; anything else is a bug, printed as
 * one line too (set KVFENCE_DEBUG=1 for the stack) with exit 2. No input a user can give makes a stack trace, and none
 * makes more than the one line: messages quote what a file or request said (an architecture, a tensor's or a key's
 * name), and a newline or a terminal's escape sequence there is written escaped.
 */
import { KvfenceError } from '../util/errors.js';

export function reportFailure(error: unknown): number {
  if (error instanceof KvfenceError) {
    process.stderr.write(`kvfence: ${oneLine(error.message)}\n`);
    return 1;
  }
  const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  process.stderr.write(`kvfence: internal error: ${oneLine(detail)}\n`);
  if (process.env['KVFENCE_DEBUG'] === '1' && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  return 2;
}

/** Control characters (C0, DEL, C1) as JSON escapes them: the line stays one line and the terminal reads no command. */
function oneLine(message: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what this escapes
  return message.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
