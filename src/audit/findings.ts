/**
 * What an audit reports. A finding is evidence that the endpoint broke isolation or correctness (a leak, a wrong
 * answer, an oversize prompt served); "cannot certify" means the auditor could not decide (the endpoint is not
 * deterministic even alone, gives no token counts, refused everything…): neither a pass nor a finding.
 */
export const SCENARIOS = [
  'canaries',
  'noninterference',
  'context',
  'interruptions',
  'storms',
  'prompt_cache',
  'noisy_neighbour',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

/** What runs without --scenarios: noisy_neighbour loads the target on purpose, so it runs only when asked for. */
export const DEFAULT_SCENARIOS: readonly ScenarioName[] = SCENARIOS.filter((s) => s !== 'noisy_neighbour');

export type FindingKind =
  | 'canary_leak'
  | 'noninterference'
  | 'noninterference_wrong_status'
  | 'context_oversize_served'
  | 'context_advertised_refused'
  | 'context_wrong_status'
  | 'interruption_wrong_answer'
  | 'interruption_wrong_status'
  | 'storm_wrong_answer'
  | 'storm_wrong_status'
  | 'prompt_cache_shared_across_tenants'
  | 'noisy_neighbour_slowdown';

export interface Finding {
  readonly kind: FindingKind;
  readonly scenario: ScenarioName;
  /** one line, says what went wrong */
  readonly summary: string;
  /** tenants involved: the reader first, then the owner of leaked data when there is one */
  readonly tenants: readonly string[];
  /** CallRecord ids involved */
  readonly calls: readonly number[];
  readonly evidence: Readonly<Record<string, string | number | boolean | null>>;
}

export type ScenarioVerdict = 'pass' | 'finding' | 'cannot_certify' | 'skipped';

export interface ScenarioResult {
  readonly scenario: ScenarioName;
  verdict: ScenarioVerdict;
  requests: number;
  readonly findings: Finding[];
  /** why it cannot certify or was skipped, and other facts worth reading */
  readonly notes: string[];
}

export function newScenario(scenario: ScenarioName): ScenarioResult {
  return { scenario, verdict: 'pass', requests: 0, findings: [], notes: [] };
}

/** A scenario's verdict from what it collected: findings win over "cannot certify". */
export function settle(result: ScenarioResult, cannotCertify: boolean): ScenarioResult {
  if (result.findings.length > 0) result.verdict = 'finding';
  else if (cannotCertify) result.verdict = 'cannot_certify';
  return result;
}

/** `kvfence audit` exit codes (docs/audit.md). 1 and 2 are every kvfence command's usage and internal errors. */
export const AUDIT_EXIT = {
  clean: 0,
  usage: 1,
  internal: 2,
  cannotCertify: 3,
  findings: 4,
} as const;

export function exitCodeOf(results: readonly ScenarioResult[]): number {
  if (results.some((r) => r.verdict === 'finding')) return AUDIT_EXIT.findings;
  if (results.some((r) => r.verdict === 'cannot_certify')) return AUDIT_EXIT.cannotCertify;
  return AUDIT_EXIT.clean;
}
