/** Temporary directories for tests, removed when the process exits. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function tempDirectory(prefix = 'kvfence-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
