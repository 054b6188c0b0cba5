/**
 * The cluster secret (DESIGN I10): every gateway and worker of one deployment holds it; the transfer layer's handshake
 * proves it on every control and transfer connection. It comes from a file (`--cluster-secret-file`, so it never shows
 * in `ps`) or the KVFENCE_CLUSTER_SECRET environment variable; the file wins. The secret is the file's text with
 * surrounding whitespace removed, as UTF-8 bytes (e.g. `openssl rand -hex 32 > secret`).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { exposedSecretFile, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export const CLUSTER_SECRET_ENV = 'KVFENCE_CLUSTER_SECRET';

export interface LoadedSecret {
  secret: Uint8Array;
  /** a warning for the startup log (a file others can read), if any */
  warning: string | undefined;
}

export function loadClusterSecret(file: string | undefined, env: NodeJS.ProcessEnv): LoadedSecret {
  let text: string;
  let source: string;
  let warning: string | undefined;
  if (file !== undefined) {
    let size: number;
    let mode: number;
    try {
      ({ size, mode } = statSync(file));
    } catch {
      throw new KvfenceError('file_not_found', `cannot read the cluster secret file ${file}`);
    }
    if (size > LIMITS.transferSecretBytesMax * 2)
      throw new KvfenceError('invalid_argument', `the cluster secret file ${file} is ${size} bytes; too large`);
    warning = exposedSecretFile(file, mode, 'the cluster secret file');
    text = readFileSync(file, 'utf8');
    source = `the file ${file}`;
  } else {
    const value = env[CLUSTER_SECRET_ENV];
    if (value === undefined || value === '') {
      throw new KvfenceError(
        'invalid_argument',
        `no cluster secret: pass --cluster-secret-file <file> or set ${CLUSTER_SECRET_ENV} (the same on every worker and the gateway)`,
      );
    }
    text = value;
    source = CLUSTER_SECRET_ENV;
  }
  const secret = new Uint8Array(Buffer.from(text.trim(), 'utf8'));
  if (secret.byteLength < LIMITS.transferSecretBytesMin || secret.byteLength > LIMITS.transferSecretBytesMax) {
    throw new KvfenceError(
      'invalid_argument',
      `the cluster secret from ${source} is ${secret.byteLength} bytes; it must be ${LIMITS.transferSecretBytesMin} to ${LIMITS.transferSecretBytesMax} (try: openssl rand -hex 32)`,
    );
  }
  return { secret, warning };
}

/** A fresh secret for a supervised cluster on one host (`kvfence serve --disaggregated`). */
export function newClusterSecretText(): string {
  return randomBytes(32).toString('hex');
}
