/** Runs the built `kvfence` command and captures its output. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI_PATH = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: readonly string[], env: NodeJS.ProcessEnv = process.env): CliResult {
  const r = spawnSync(process.execPath, [CLI_PATH, ...args], { encoding: 'utf8', env, timeout: 300_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
