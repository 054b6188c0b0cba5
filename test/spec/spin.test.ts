/**
 * Model-checks spec/kvfence.pml with spin (exhaustive search): the model must satisfy P1–P3, and each mutant built
 * from the same source must violate the property it was made to break. Skips, saying why, only when `spin` or a C
 * compiler is not installed (CI installs spin: see .ci/run).
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDirectory } from '../helpers/temp.js';

const MODEL_PATH = fileURLToPath(new URL('../../../spec/kvfence.pml', import.meta.url));
const STEP_TIMEOUT_MS = 120_000;
const OUTPUT_BYTES_MAX = 16 * 1024 * 1024;

function missingTool(): string | undefined {
  for (const [tool, flag] of [
    ['spin', '-V'],
    ['gcc', '--version'],
  ] as const) {
    const r = spawnSync(tool, [flag], { encoding: 'utf8', timeout: 10_000 });
    if (r.error !== undefined || r.status !== 0) return tool;
  }
  return undefined;
}

const missing = missingTool();
const skip = missing === undefined ? false : `${missing} is not installed (apt-get install -y spin gcc)`;
if (missing !== undefined) process.stderr.write(`spin.test: SKIPPED: ${missing} is not installed\n`);

function run(command: string, args: readonly string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, timeout: STEP_TIMEOUT_MS, maxBuffer: OUTPUT_BYTES_MAX }, (error, stdout, stderr) => {
      // pan exits non-zero when it finds an error; the output says which, so only a missing or killed tool fails here
      if (error !== null && (typeof error.code !== 'number' || error.killed === true)) {
        reject(new Error(`${command} ${args.join(' ')}: ${error.message}\n${stderr}`));
        return;
      }
      resolve(`${stdout}${stderr}`);
    });
  });
}

interface Check {
  /** -D definitions for spin's preprocessor, e.g. NREQ=1 */
  defines: readonly string[];
  /** liveness: acceptance cycles under weak fairness for the named LTL property; otherwise safety */
  ltl?: string;
  /** pan flags beyond the search depth */
  panFlags?: readonly string[];
}

async function verify(check: Check): Promise<string> {
  const dir = tempDirectory('kvfence-spin-');
  copyFileSync(MODEL_PATH, join(dir, 'kvfence.pml'));
  const spinOut = await run('spin', [...check.defines.map((d) => `-D${d}`), '-a', 'kvfence.pml'], dir);
  assert.doesNotMatch(spinOut, /error/i, `spin -a failed:\n${spinOut}`);
  const gccFlags = check.ltl === undefined ? ['-DSAFETY', '-DNOCLAIM'] : [];
  await run('gcc', ['-O2', '-DCOLLAPSE', ...gccFlags, '-o', 'pan', 'pan.c'], dir);
  const ltlFlags = check.ltl === undefined ? [] : ['-a', '-f', '-N', check.ltl];
  const out = await run(join(dir, 'pan'), ['-m200000', ...ltlFlags, ...(check.panFlags ?? [])], dir);
  assert.doesNotMatch(out, /max search depth too small/, 'the search must be exhaustive');
  return out;
}

function errorCount(out: string): number {
  const m = /errors: (\d+)/.exec(out);
  assert.ok(m !== null, `no error count in pan's output:\n${out}`);
  return Number(m[1]);
}

function statesStored(out: string): number {
  const m = /([\d.e+]+) states, stored/.exec(out);
  return m === null ? 0 : Number(m[1]);
}

describe('spec/kvfence.pml (spin)', { skip, concurrency: 2 }, () => {
  it('satisfies P1, P2 and P3 (at most once, no hang) with 2 requests and one fault', async () => {
    const out = await verify({ defines: [] });
    assert.equal(errorCount(out), 0, out);
    assert.ok(statesStored(out) > 100_000, 'the search explored the model');
  });

  it('satisfies P3_every_request_ends under weak fairness (2 requests; 1 request with one fault)', async () => {
    for (const defines of [['FAULTS_MAX=0'], ['NREQ=1']]) {
      const out = await verify({ defines, ltl: 'P3_every_request_ends' });
      assert.equal(errorCount(out), 0, `${defines.join(' ')}:\n${out}`);
    }
  });

  it('finds the incident: MUTANT_PLACEHOLDER violates P1 and P2', async () => {
    const out = await verify({ defines: ['MUTANT_PLACEHOLDER', 'FAULTS_MAX=0'], panFlags: ['-c0'] });
    assert.ok(errorCount(out) > 0, out);
    assert.match(out, /assertion violated P1_decode_reads_own_pages/);
    assert.match(out, /assertion violated P2_no_success_after_failure/);
  });

  it('finds the hang: MUTANT_NO_DEADLINE violates P3 (a stuck request, a run where it never ends)', async () => {
    const safety = await verify({ defines: ['MUTANT_NO_DEADLINE'] });
    assert.match(safety, /invalid end state/);
    const liveness = await verify({ defines: ['MUTANT_NO_DEADLINE'], ltl: 'P3_every_request_ends' });
    assert.match(liveness, /acceptance cycle/);
  });
});
