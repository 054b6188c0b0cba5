/**
 * Admission, written once (DESIGN I2, I11): what every entry point checks about a request before anything is
 * reserved, and which waiting requests a worker admits next. The gateway, the colocated engine, the prefill engine and
 * the decode worker all call these two functions; none has a copy.
 *
 * Who goes next (pickAdmissions): of the tenants with a request waiting, the one holding the smallest share of the
 * worker — its slots in the running batch or its pages in the pool, whichever share is larger — with its oldest
 * request; arrival breaks ties. Each tenant's requests keep their order.
 *
 *   queue:  a1  a2  b1  a3  c1          (a is at its page quota, the pool has room)
 *           ──  ──  ✔   ──  ✔           a waits, keeping its own order; b and c pass it
 *
 *   queue:  a5  a6  b1                  (a holds most of the batch and pool, b nothing; one slot frees)
 *           ──  ──  ✔                   b goes first: a tenant inside its limits cannot keep another out
 *
 *   queue:  b1  a5                      (b, holding least, wants more pages than are free)
 *           ──  ──                      admission stops until they are: a large request is not starved by small ones
 *                                       (a paused sequence, needing no pages, still takes a free slot meanwhile)
 *
 * A tenant at its limit waits; others pass. The chosen request waits only for room in the batch or the pool, which
 * others' requests free as they end, and no tenant holding more is admitted before it (DESIGN I11). When only batch
 * slots keep it out, the engine may pause running sequences of a tenant holding more slots to make room (slotDonors).
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
  /** a paused sequence (slotDonors): admitted already, its pages held, it takes one slot and no pages to go on */
  readonly resumes?: boolean;
}

/** The pool and batch as admission sees them now. */
export interface AdmissionRoom {
  /** batch slots taken now (running or in transfer), and the most there may be */
  running: number;
  runningMax: number;
  /** pages that can be handed out now (free, plus evictable cached pages), and the pool's size */
  freePages: number;
  poolPages: number;
  /** pages a tenant's admitted requests hold now: its quota's measure */
  pagesOfTenant(tenant: string): number;
  /** batch slots a tenant's admitted requests take now */
  slotsOfTenant(tenant: string): number;
}

/** One admission pass: who goes now, in order, and the request chosen next when only batch slots keep it waiting. */
export interface AdmissionPass<T> {
  admitted: T[];
  /** the request the pass stopped at, when its pages are free and its slots are not (slotDonors may make them) */
  waitsForSlots?: T;
}

/** The waiting requests to admit now, in the order they go. Pure: the caller reserves their pages. */
export function pickAdmissions<T extends AdmissionCandidate>(waiting: readonly T[], room: AdmissionRoom): T[] {
  return admissionPass(waiting, room).admitted;
}

/** pickAdmissions, also saying whether the pass stopped for batch slots alone. */
export function admissionPass<T extends AdmissionCandidate>(
  waiting: readonly T[],
  room: AdmissionRoom,
): AdmissionPass<T> {
  // each tenant's requests in arrival order; a Map keeps tenants in order of their first arrival
  const queues = new Map<string, T[]>();
  for (const candidate of waiting) {
    const queue = queues.get(candidate.tenant);
    if (queue === undefined) queues.set(candidate.tenant, [candidate]);
    else queue.push(candidate);
  }
  const arrival = new Map(waiting.map((c, i) => [c, i]));
  const pages = new Map<string, number>();
  const slots = new Map<string, number>();
  for (const tenant of queues.keys()) {
    pages.set(tenant, room.pagesOfTenant(tenant));
    slots.set(tenant, room.slotsOfTenant(tenant));
  }
  const share = (head: T) => turnOf(room, head, slots.get(head.tenant)!, pages.get(head.tenant)!);
  const admitted: T[] = [];
  let free = room.freePages;
  let running = room.running;
  // the request chosen waits for pages: the rest wait with it, but for paused sequences, which need none (they hold
  // pages it may be waiting for: left paused, nothing might ever free them)
  let waitsForPages = false;
  for (;;) {
    let next: T | undefined;
    for (const [tenant, queue] of queues) {
      const head = queue[0];
      if (head === undefined || (waitsForPages && head.resumes !== true)) continue;
      if (pages.get(tenant)! + head.pagesNeeded > head.tenantPagesMax) {
        queue.length = 0; // at its quota: the tenant waits, in its own order (its later requests do not pass this one)
        continue;
      }
      const better =
        next === undefined ||
        share(head) < share(next) ||
        (share(head) === share(next) && arrival.get(head)! < arrival.get(next)!);
      if (better) next = head;
    }
    if (next === undefined) break;
    const need = next.slots ?? 1;
    // the tenant holding least waits for room, and everyone with it: nothing passes a request because it is large
    if (next.pagesNeeded > free) {
      waitsForPages = true;
      continue;
    }
    if (running + need > room.runningMax) return waitsForPages ? { admitted } : { admitted, waitsForSlots: next };
    free -= next.pagesNeeded;
    running += need;
    pages.set(next.tenant, pages.get(next.tenant)! + next.pagesNeeded);
    slots.set(next.tenant, slots.get(next.tenant)! + need);
    queues.get(next.tenant)!.shift();
    admitted.push(next);
  }
  return { admitted };
}

/**
 * Pausing instead of waiting (I11): when the request chosen next (`waiter`) waits for batch slots alone, the tenants
 * whose running sequences pause to make them: one slot at a time from the tenant running the most, and only while that
 * tenant keeps at least as many slots as the waiter's will have once admitted, and a larger share of the batch than the
 * waiter's tenant has of the worker now (so the next pass, where the paused sequence's turn is by its tenant's slots
 * alone, admits the waiter, not the paused sequence, and the two never trade places back and forth). `pausable`:
 * per tenant, its running sequences that can pause (one answer each, or an n > 1 request's choices once forked).
 * Undefined (nobody pauses) when that cannot make every slot needed. A paused sequence keeps its pages and resumes as
 * an admission candidate ahead of its tenant's waiting requests.
 *
 *   running:  a a a a a a a a   (a: 8 of 8 slots)      b1 waits for one slot
 *   pauses:   a ─ the youngest       a keeps 7 ≥ b's 1:  b1 runs at the next step, not when one of a's requests ends
 */
export function slotDonors(
  waiter: AdmissionCandidate,
  room: AdmissionRoom,
  pausable: ReadonlyMap<string, number>,
): string[] | undefined {
  const need = waiter.slots ?? 1;
  const waiterSlots = room.slotsOfTenant(waiter.tenant);
  const waiterShare = turnOf(room, waiter, waiterSlots, room.pagesOfTenant(waiter.tenant));
  const left = new Map([...pausable].map(([tenant, count]) => [tenant, { slots: room.slotsOfTenant(tenant), count }]));
  const donors: string[] = [];
  while (room.running - donors.length + need > room.runningMax) {
    let donor: string | undefined;
    for (const [tenant, share] of left) {
      if (tenant === waiter.tenant || share.count === 0) continue;
      if (donor === undefined || share.slots > left.get(donor)!.slots) donor = tenant;
    }
    if (donor === undefined) return undefined;
    const share = left.get(donor)!;
    share.slots--;
    share.count--;
    // the donor's next turn is its paused sequence's: by its slots alone (turnOf)
    const fair = share.slots > waiterSlots + need - 1 && share.slots / room.runningMax > waiterShare;
    if (!fair) return undefined;
    donors.push(donor);
  }
  return donors;
}

/**
 * A tenant's share of the worker, as admission orders tenants for `head`, its next candidate: its batch slots or its
 * pool pages, the larger. For a paused sequence, its slots alone: it takes a slot and no pages, and the pages its
 * tenant holds (its own among them) are given back only by running; counted, a tenant whose sequences all paused
 * could stay behind others' fresh requests for as long as those keep coming.
 */
function turnOf(room: AdmissionRoom, head: AdmissionCandidate, slots: number, pages: number): number {
  const slotShare = slots / room.runningMax;
  return head.resumes === true ? slotShare : Math.max(slotShare, pages / Math.max(1, room.poolPages));
}
