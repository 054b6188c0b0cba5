/**
 * The timing measurements of the prompt-cache and noisy-neighbour scenarios, kept in the report (JSON) so that the
 * HTML report can plot them and a reader can redo the statistics.
 */
export type CachePairVerdict = 'shared' | 'within_tenant' | 'no_cache' | 'cannot_certify';

export interface CachePairTiming {
  victim: string;
  attacker: string;
  /** time to first token (ms) of each procedure, one sample per round */
  missMs: number[];
  hitMs: number[];
  attackMs: number[];
  /** exact one-sided KS p-values: attack faster than miss, hit faster than miss, hit faster than attack */
  pAttackFaster: number;
  pHitFaster: number;
  pHitFasterThanAttack: number;
  /** the speed-up the test detects with the stated power, from the measured misses */
  detectableMs: number;
  verdict: CachePairVerdict;
}

export interface PromptCacheTiming {
  prefixTokens: number;
  prefixWords: number;
  /** the prefix's prefill time as calibrated (what a cache that holds it saves) */
  expectedSavingMs: number;
  samplesPerProcedure: number;
  familyAlpha: number;
  testAlpha: number;
  power: number;
  pairs: CachePairTiming[];
}

export interface NoisyNeighbourTiming {
  victim: string;
  flooder: string;
  /** end-to-end latency (ms) of the victim's short probes, benign load, then the flood */
  baselineMs: number[];
  floodMs: number[];
  /** the flood's median latency may not exceed this (ms) */
  boundMs: number;
  ratio: number;
  baselineStreams: number;
  floodStreams: number;
  floodRequests: number;
  floodStatuses: Record<string, number>;
}

export interface AuditTiming {
  promptCache?: PromptCacheTiming;
  noisyNeighbour?: NoisyNeighbourTiming;
}
