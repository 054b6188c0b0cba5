/**
 * Admission, written once (DESIGN I2, I11): what every entry point checks about a request before anything is
 * reserved, and which waiting requests a worker admits next. The gateway, the colocated engine, the prefill engine and
 * the decode worker all call these two functions; none has a copy.
 *
 * Who waits for whom (pickAdmissions, one pass over the queue in arrival order):
 *
 *   queue:  a1  a2  b1  a3  c1          (a is at its page quota, the pool has room)
 *           ──  ──  ✔   ──  ✔           a waits, keeping its own order; b and c pass it
 *
 *   queue:  a1  b1  c1                  (a1 needs more pages than are free)
 *           ──  ──  ──                  admission stops: a large request is not starved by small ones
 *
 * A tenant at its limit waits; others pass. Only the pool as a whole (or the batch's slots) makes everyone wait.
 */
import { KvfenceError } from '../util/errors.js';
import type { GenerationRequest } from './request.js';

/**
 * I2: prompt + maxTokens must fit the proven context. The one wording clients see, whichever side checks (the gateway
 * first; each worker again, defence in depth). `param` names the field at fault (messages or prompt).
 */
export function contextError(
  promptLength: number,
  maxTokens: number,
  context: number,
  param: 'messages' | 'prompt',
): KvfenceError | undefined {
  if (maxTokens >= 1 && promptLength + maxTokens <= context) return undefined;
  const completion = Math.max(maxTokens, 1);
  return new KvfenceError(
    'context_length_exceeded',
    `This model's maximum context length is ${context} tokens. However, you requested ${promptLength + completion} tokens ` +
      `(${promptLength} in the ${param}, ${completion} in the completion). ` +
      'Please reduce the length of the prompt or the completion.',
    param,
  );
}

export interface RequestBounds {
  /** the worker's own I1 proof */
  provenContext: number;
  vocabSize: number;
}

/**
 * Everything a worker checks about a request before queueing it: a prompt, maxTokens ≥ 1, I2 against its own proof,
 * every token id inside the vocabulary, a positive page quota. Throws a KvfenceError (400); nothing reserved.
 */
export function validateRequest(request: GenerationRequest, bounds: RequestBounds): void {
  const { promptTokens, maxTokens, tenantKvPagesMax } = request;
  if (promptTokens.length === 0) throw new KvfenceError('invalid_request_error', 'the prompt is empty', 'prompt');
  if (!Number.isInteger(maxTokens) || maxTokens < 1)
    throw new KvfenceError('invalid_request_error', 'max tokens must be an integer of at least 1', 'max_tokens');
  const tooLong = contextError(promptTokens.length, maxTokens, bounds.provenContext, 'messages');
  if (tooLong !== undefined) throw tooLong;
  for (const id of promptTokens) {
    if (!Number.isInteger(id) || id < 0 || id >= bounds.vocabSize) {
      throw new KvfenceError(
        'invalid_request_error',
        `token id ${id} is outside the vocabulary of ${bounds.vocabSize}`,
        'prompt',
      );
    }
  }
  if (!Number.isInteger(tenantKvPagesMax) || tenantKvPagesMax < 1)
    throw new KvfenceError('invalid_request_error', 'the tenant page quota must be a positive integer');
}

/**
 * A request that could never be admitted here fails now instead of waiting out its queue timeout: its pages exceed the
 * pool or its tenant's quota. Only reachable past a bypassed I1 proof or a quota below the context (the gateway proves
 * both at startup): loud, never truncated.
 */
export function checkFits(pagesNeeded: number, poolPages: number, tenantPagesMax: number, where: string): void {
  if (pagesNeeded > poolPages)
    throw new KvfenceError(
      'kv_capacity_exceeded',
      `the request needs ${pagesNeeded} KV pages but the ${where} pool has only ${poolPages}`,
    );
  if (pagesNeeded > tenantPagesMax)
    throw new KvfenceError(
      'kv_capacity_exceeded',
      `the request needs ${pagesNeeded} KV pages but its tenant's quota is ${tenantPagesMax}`,
    );
}

/** A waiting request as admission sees it. */
export interface AdmissionCandidate {
  readonly tenant: string;
  /** pages it reserves when admitted */
  readonly pagesNeeded: number;
  /** its tenant's page quota on this pool */
  readonly tenantPagesMax: number;
  /** running-batch slots it takes when admitted (its n choices; absent means 1) */
  readonly slots?: number;
}

/** The pool and batch as admission sees them now. */
export interface AdmissionRoom {
  /** requests running (or in transfer) now, and the most there may be */
  running: number;
  runningMax: number;
  /** pages that can be handed out now (free, plus evictable cached pages) */
  freePages: number;
  /** pages a tenant's admitted requests hold now: its quota's measure */
  pagesOfTenant(tenant: string): number;
}

/** The waiting requests to admit now, in arrival order. Pure: the caller reserves their pages. */
export function pickAdmissions<T extends AdmissionCandidate>(waiting: readonly T[], room: AdmissionRoom): T[] {
  const admitted: T[] = [];
  const waitingTenants = new Set<string>();
  const added = new Map<string, number>();
  let free = room.freePages;
  let running = room.running;
  for (const candidate of waiting) {
    const slots = candidate.slots ?? 1;
    const { tenant, pagesNeeded } = candidate;
    if (waitingTenants.has(tenant)) continue;
    const held = room.pagesOfTenant(tenant) + (added.get(tenant) ?? 0);
    if (held + pagesNeeded > candidate.tenantPagesMax) {
      waitingTenants.add(tenant); // keeps the tenant's own order: its later requests do not pass this one
      continue;
    }
    // only a request its tenant's quota lets through holds up those behind it (for slots or pages): one that waits on
    // its own tenant never does, however many slots it wants
    if (running + slots > room.runningMax) break;
    if (pagesNeeded > free) break;
    free -= pagesNeeded;
    running += slots;
    added.set(tenant, (added.get(tenant) ?? 0) + pagesNeeded);
    admitted.push(candidate);
  }
  return admitted;
}
