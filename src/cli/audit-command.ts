/**
 * `kvfence audit`: the black-box isolation auditor (src/audit/, docs/audit.md). Prints live progress on stderr, the
 * summary on stdout, optionally a JSON report and an HTML page; exits 0 clean, 3 cannot certify, 4 findings (1 usage,
 * 2 internal).
 */
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { runAudit } from '../audit/auditor.js';
import { DEFAULT_SCENARIOS, SCENARIOS, type ScenarioName } from '../audit/findings.js';
import { formatHtmlReport } from '../audit/html-report.js';
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
  html?: string;
  seed: number;
  api: 'completions' | 'chat';
  context?: number;
  maxTokens: number;
  timeout: number;
  logprobTolerance: number | 'auto';
  matchChars: number;
  stormSize: number;
  scenarios?: readonly ScenarioName[];
  cacheSamples?: number;
  cachePairs?: number;
}

/** Default samples a procedure of the prompt-cache scenario (docs/audit.md: what they can detect). */
export const CACHE_SAMPLES_DEFAULT = 20;
/** Default most tenant pairs it tests: every ordered pair of up to 3 tenants. */
export const CACHE_PAIRS_DEFAULT = 6;

function parseTolerance(value: string): number | 'auto' {
  return value === 'auto' ? 'auto' : parseNumber(0, 10)(value);
}

function parseScenarios(value: string): ScenarioName[] {
  const names = value.split(',').map((v) => v.trim());
  for (const name of names) {
    if (!(SCENARIOS as readonly string[]).includes(name)) {
      throw new InvalidArgumentError(`unknown scenario "${name}": expected some of ${SCENARIOS.join(', ')}`);
    }
  }
  return [...new Set(names as ScenarioName[])];
}

export function addAuditCommand(program: Command): void {
  program
    .command('audit')
    .description('audit an OpenAI-compatible endpoint for cross-tenant leaks and wrong answers (docs/audit.md)')
    .requiredOption('--target <url>', 'base URL of the endpoint, e.g. http://host:8000/v1')
    .requiredOption('--keys <file>', 'API keys of 2+ tenants: "tenant key" lines, or JSON [{"tenant","key"}]')
    .option('--model <name>', 'model to audit (default: the first one /v1/models lists)')
    .option('--requests <n>', 'most requests the audit sends, all scenarios together', parseInteger(40, 100_000), 1000)
    .option('--concurrency <c>', 'requests in flight at once (storm bursts go beyond)', parseInteger(1, 256), 8)
    .option('--json <file>', 'also write the full report as JSON')
    .option('--html <file>', 'also write a self-contained HTML report (verdict, findings, timing plots)')
    .option(
      '--scenarios <list>',
      `comma-separated, of ${SCENARIOS.join(', ')} (default: all but noisy_neighbour)`,
      parseScenarios,
    )
    .option('--seed <s>', 'seed of the plan and of every request', parseInteger(0, 2 ** 31 - 1), 1)
    .option('--api <dialect>', 'completions or chat', parseChoice(['completions', 'chat'] as const), 'completions')
    .option('--context <n>', 'context length to test (default: what /v1/models advertises)', parseInteger(8, 1 << 24))
    .option('--max-tokens <n>', 'tokens per probe answer', parseInteger(1, 4096), 16)
    .option('--timeout <ms>', 'per-request timeout', parseInteger(100, 3_600_000), 120_000)
    .option(
      '--logprob-tolerance <x>',
      "logprob difference still equal (0: bit-identical; 'auto': from the endpoint's solo-run jitter)",
      parseTolerance,
      0,
    )
    .option('--match-chars <n>', 'characters of a marker that make a leak', parseInteger(8, 24), 12)
    .option('--storm-size <n>', 'requests fired at once in a storm burst', parseInteger(2, 1024), 32)
    .option(
      '--cache-samples <n>',
      'prompt_cache: timing samples of each procedure per tenant pair',
      parseInteger(10, 500),
      CACHE_SAMPLES_DEFAULT,
    )
    .option(
      '--cache-pairs <n>',
      'prompt_cache: most ordered tenant pairs tested (all when fewer, else a cycle)',
      parseInteger(1, 64),
      CACHE_PAIRS_DEFAULT,
    )
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
      cacheSamples: o.cacheSamples ?? CACHE_SAMPLES_DEFAULT,
      cachePairs: o.cachePairs ?? CACHE_PAIRS_DEFAULT,
      scenarios: o.scenarios ?? DEFAULT_SCENARIOS,
    },
    io.stderr,
  );
  io.stdout.write(formatSummary(report));
  if (o.json !== undefined) write(o.json, `${JSON.stringify(report, null, 2)}\n`);
  if (o.html !== undefined) write(o.html, formatHtmlReport(report));
  return report.exitCode;
}

function write(path: string, text: string): void {
  try {
    writeFileSync(path, text);
  } catch (error) {
    throw new KvfenceError('invalid_argument', `cannot write ${path}: ${errorMessage(error)}`);
  }
}
