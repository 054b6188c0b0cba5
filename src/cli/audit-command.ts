/**
 * `kvfence audit`: the black-box isolation auditor (src/audit/, docs/audit.md). Prints live progress on stderr, the
 * summary on stdout, optionally a JSON report; exits 0 clean, 3 cannot certify, 4 findings (1 usage, 2 internal).
 */
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { runAudit } from '../audit/auditor.js';
import { loadAuditKeys } from '../audit/keys-file.js';
import type { ProgressSink } from '../audit/progress.js';
import { formatSummary } from '../audit/report.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { parseChoice, parseInteger, parseNumber } from './options.js';

export interface AuditCliOptions {
  target: string;
  keys: string;
  model?: string;
  requests: number;
  concurrency: number;
  json?: string;
  seed: number;
  api: 'completions' | 'chat';
  context?: number;
  maxTokens: number;
  timeout: number;
  logprobTolerance: number;
  matchChars: number;
  stormSize: number;
}

export function addAuditCommand(program: Command): void {
  program
    .command('audit')
    .description('audit an OpenAI-compatible endpoint for cross-tenant leaks and wrong answers (docs/audit.md)')
    .requiredOption('--target <url>', 'base URL of the endpoint, e.g. http://host:8000/v1')
    .requiredOption('--keys <file>', 'API keys of 2+ tenants: "tenant key" lines, or JSON [{"tenant","key"}]')
    .option('--model <name>', 'model to audit (default: the first one /v1/models lists)')
    .option('--requests <n>', 'most requests the audit sends, all scenarios together', parseInteger(40, 100_000), 400)
    .option('--concurrency <c>', 'requests in flight at once (storm bursts go beyond)', parseInteger(1, 256), 8)
    .option('--json <file>', 'also write the full report as JSON')
    .option('--seed <s>', 'seed of the plan and of every request', parseInteger(0, 2 ** 31 - 1), 1)
    .option('--api <dialect>', 'completions or chat', parseChoice(['completions', 'chat'] as const), 'completions')
    .option('--context <n>', 'context length to test (default: what /v1/models advertises)', parseInteger(8, 1 << 24))
    .option('--max-tokens <n>', 'tokens per probe answer', parseInteger(1, 4096), 16)
    .option('--timeout <ms>', 'per-request timeout', parseInteger(100, 3_600_000), 120_000)
    .option('--logprob-tolerance <x>', 'logprob difference still equal (0: bit-identical)', parseNumber(0, 10), 0)
    .option('--match-chars <n>', 'characters of a marker that make a leak', parseInteger(8, 24), 12)
    .option('--storm-size <n>', 'requests fired at once in a storm burst', parseInteger(2, 1024), 32)
    .action(async (o: AuditCliOptions) => {
      process.exitCode = await runAuditCommand(o, { stdout: process.stdout, stderr: process.stderr });
    });
}

export interface AuditIo {
  stdout: { write(text: string): unknown };
  stderr: ProgressSink;
}

/** Runs one audit and returns its exit code; a KvfenceError (bad keys file, unreachable target) is a usage error. */
export async function runAuditCommand(o: AuditCliOptions, io: AuditIo): Promise<number> {
  const tenants = loadAuditKeys(o.keys);
  const report = await runAudit(
    {
      target: o.target,
      tenants,
      model: o.model,
      api: o.api,
      requests: o.requests,
      seed: o.seed,
      timeoutMs: o.timeout,
      responseBytesMax: 4 * 1024 * 1024,
      matchChars: o.matchChars,
      concurrency: o.concurrency,
      maxTokens: o.maxTokens,
      logprobTolerance: o.logprobTolerance,
      probesPerTenant: 2,
      stormSize: o.stormSize,
      context: o.context,
    },
    io.stderr,
  );
  io.stdout.write(formatSummary(report));
  if (o.json !== undefined) {
    try {
      writeFileSync(o.json, `${JSON.stringify(report, null, 2)}\n`);
    } catch (error) {
      throw new KvfenceError('invalid_argument', `cannot write ${o.json}: ${errorMessage(error)}`);
    }
  }
  return report.exitCode;
}
