/**
 * Continuous batching: which waiting sequences join the running batch, and which tokens each running sequence feeds
 * this step. Pure decisions over the queues and the pool's counters; the engine carries them out.
 *
 * Admission (FIFO, all or nothing): a sequence is admitted only when its whole need (prompt + maxTokens, in pages) can
 * be reserved now, so a running sequence never runs out of pages: no overcommit, no preemption, no truncation.
 * - over its tenant's page quota: the tenant's sequences wait (later sequences of other tenants may pass them);
 * - short of free pages in the pool: admission stops (later sequences may not pass, so a large one is not starved).
 *
 * Each step: every decoding sequence feeds its last token (1 each), then prefilling sequences, oldest first, take
 * prompt chunks of at most prefillChunkTokens from what is left of the step token budget.
 */
import type { ForwardInput } from '../compute/forward.js';
import { assert } from '../util/assert.js';
import type { EngineConfig } from './engine-config.js';
import type { Sequence } from './sequence.js';

/** The pages admission may hand out now, and what each tenant's running requests hold (its quota's measure). */
export interface AdmissionPages {
  /** free pages, plus cached pages that can be evicted */
  free: number;
  ofTenant(tenant: string): number;
}

/** The waiting sequences to admit now, in order. */
export function pickAdmissions(
  config: EngineConfig,
  waiting: readonly Sequence[],
  runningCount: number,
  pages: AdmissionPages,
): Sequence[] {
  const admitted: Sequence[] = [];
  const blockedTenants = new Set<string>();
  const pagesAdded = new Map<string, number>();
  let free = pages.free;
  for (const seq of waiting) {
    if (runningCount + admitted.length >= config.runningMax) break;
    if (blockedTenants.has(seq.tenant)) continue;
    const tenantPages = pages.ofTenant(seq.tenant) + (pagesAdded.get(seq.tenant) ?? 0);
    if (tenantPages + seq.pagesNeeded > config.tenantLimits(seq.tenant).kvPagesMax) {
      blockedTenants.add(seq.tenant); // keeps the tenant's own order: its later requests do not pass this one
      continue;
    }
    if (seq.pagesNeeded > free) break;
    free -= seq.pagesNeeded;
    pagesAdded.set(seq.tenant, tenantPages + seq.pagesNeeded - pages.ofTenant(seq.tenant));
    admitted.push(seq);
  }
  return admitted;
}

export interface PlannedInput {
  seq: Sequence;
  input: ForwardInput;
}

/** This step's forward inputs: decode tokens first, then prefill chunks under the step token budget. */
export function planStep(config: EngineConfig, running: readonly Sequence[]): PlannedInput[] {
  const planned: PlannedInput[] = [];
  let budget = config.stepTokenBudget;
  for (const seq of running) {
    if (seq.state !== 'decoding') continue;
    assert(seq.table !== undefined && seq.nextInput !== undefined, 'a decoding sequence has pages and a token to feed');
    planned.push({ seq, input: { table: seq.table, tokens: [seq.nextInput], logits: 'last' } });
    budget--;
  }
  assert(budget >= 0, 'the step budget covers every decoding sequence (validated at startup)');
  for (const seq of running) {
    if (seq.state !== 'prefilling' || budget === 0) continue;
    assert(seq.table !== undefined, 'a prefilling sequence has pages');
    const prompt = seq.request.promptTokens;
    const start = seq.table.writtenTokens;
    const count = Math.min(config.prefillChunkTokens, prompt.length - start, budget);
    assert(count > 0, 'a prefilling sequence has prompt left');
    const last = start + count === prompt.length;
    planned.push({
      seq,
      input: { table: seq.table, tokens: prompt.slice(start, start + count), logits: last ? 'last' : 'none' },
    });
    budget -= count;
  }
  return planned;
}
