/**
 * The operator's token for what tenants must not see of each other: /metrics' per-tenant series (`--admin-token-file`).
 * Only its SHA-256 is kept; a presented token is hashed and compared in constant time, as API keys are (tenants.ts).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { errorMessage, exposedSecretFile, KvfenceError } from '../util/errors.js';

/** a token file holds one line; anything larger is a wrong file */
const TOKEN_FILE_BYTES_MAX = 4096;
/** shorter tokens are guessable */
const TOKEN_CHARS_MIN = 16;

export class AdminToken {
  private constructor(private readonly hash: Buffer) {}

  /**
   * Reads the token (surrounding whitespace dropped) from `path`; refuses a missing, huge or short one, and tells
   * `warn` when every user may read the file (exposedSecretFile).
   */
  static fromFile(path: string, warn: (line: string) => void = () => {}): AdminToken {
    let text: string;
    try {
      const { size, mode } = statSync(path);
      if (size > TOKEN_FILE_BYTES_MAX) throw new Error(`larger than ${TOKEN_FILE_BYTES_MAX} bytes`);
      const exposed = exposedSecretFile(path, mode, 'the admin token file');
      if (exposed !== undefined) warn(`kvfence: WARNING: ${exposed}`);
      text = readFileSync(path, 'utf8').trim();
    } catch (error) {
      throw new KvfenceError('file_not_found', `cannot read the admin token file ${path}: ${errorMessage(error)}`);
    }
    if (text.length < TOKEN_CHARS_MIN || /\s/.test(text))
      throw new KvfenceError(
        'invalid_argument',
        `the admin token in ${path} must be one word of at least ${TOKEN_CHARS_MIN} characters`,
      );
    return new AdminToken(sha256(text));
  }

  /** Whether an Authorization header carries this token ("Bearer <token>"). */
  matches(authorization: string | undefined): boolean {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    // hash whatever was presented: the comparison takes the same time whether or not a token was there
    const same = this.matchesToken(match?.[1] ?? '');
    return same && match !== null;
  }

  /** Whether `token` is this token (the dashboard's login form or `?token=`). */
  matchesToken(token: string): boolean {
    return timingSafeEqual(sha256(token), this.hash);
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}
