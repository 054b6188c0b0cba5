import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { KvfenceError } from '../util/errors.js';
import {
  type AdmissionCandidate,
  type AdmissionRoom,
  admissionPass,
  checkFits,
  contextError,
  pickAdmissions,
  slotDonors,
  validateRequest,
} from './admission.js';
import type { GenerationRequest } from './request.js';
import { GREEDY } from './sampler.js';

const BOUNDS = { provenContext: 16, vocabSize: 100 };

function request(overrides: Partial<GenerationRequest> = {}): GenerationRequest {
  return {
    id: 'r1',
    tenant: 'acme',
    promptTokens: [1, 2, 3],
    maxTokens: 4,
    sampling: GREEDY,
    topLogprobs: 0,
    tenantKvPagesMax: 8,
    ...overrides,
  };
}

/** Asserts that `fn` throws a KvfenceError with this code (and param, when given). */
function throwsCode(fn: () => void, code: string, param?: string): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof KvfenceError, `not a KvfenceError: ${String(error)}`);
    assert.equal(error.code, code);
    if (param !== undefined) assert.equal(error.param, param);
    return true;
  });
}

test('contextError: prompt + maxTokens may reach the context exactly, not one past it', () => {
  assert.equal(contextError(10, 6, 16, 'prompt'), undefined);
  const over = contextError(10, 7, 16, 'prompt');
  assert.ok(over instanceof KvfenceError);
  assert.equal(over.code, 'context_length_exceeded');
  assert.equal(over.param, 'prompt');
  assert.equal(
    over.message,
    "This model's maximum context length is 16 tokens. However, you requested 17 tokens " +
      '(10 in the prompt, 7 in the completion). Please reduce the length of the prompt or the completion.',
  );
  const none = contextError(3, 0, 16, 'messages');
  assert.ok(none instanceof KvfenceError, 'maxTokens 0 never fits');
  assert.equal(none.code, 'context_length_exceeded');
  assert.equal(none.param, 'messages');
  assert.match(none.message, /you requested 4 tokens \(3 in the messages, 1 in the completion\)/);
});

test('validateRequest refuses each malformed request with its own code and param', () => {
  validateRequest(request(), BOUNDS);
  validateRequest(request({ promptTokens: [0, 99], maxTokens: 14 }), BOUNDS); // ids at both ends, context exactly
  throwsCode(() => validateRequest(request({ promptTokens: [] }), BOUNDS), 'invalid_request_error', 'prompt');
  throwsCode(() => validateRequest(request({ maxTokens: 0 }), BOUNDS), 'invalid_request_error', 'max_tokens');
  throwsCode(() => validateRequest(request({ maxTokens: 1.5 }), BOUNDS), 'invalid_request_error', 'max_tokens');
  for (const id of [100, -1, 2.5, Number.NaN]) {
    throwsCode(() => validateRequest(request({ promptTokens: [1, id] }), BOUNDS), 'invalid_request_error', 'prompt');
  }
  throwsCode(
    () => validateRequest(request({ promptTokens: [1, 2, 3], maxTokens: 14 }), BOUNDS),
    'context_length_exceeded',
    'messages',
  );
  throwsCode(() => validateRequest(request({ tenantKvPagesMax: 0 }), BOUNDS), 'invalid_request_error');
  throwsCode(() => validateRequest(request({ tenantKvPagesMax: 1.5 }), BOUNDS), 'invalid_request_error');
});

test('checkFits: a request larger than the pool or its tenant quota fails as kv_capacity_exceeded', () => {
  checkFits(8, 8, 8, 'decode');
  throwsCode(() => checkFits(9, 8, 100, 'decode'), 'kv_capacity_exceeded');
  assert.throws(() => checkFits(9, 8, 100, 'decode'), /needs 9 KV pages but the decode pool has only 8/);
  throwsCode(() => checkFits(5, 100, 4, 'decode'), 'kv_capacity_exceeded');
  assert.throws(() => checkFits(5, 100, 4, 'decode'), /needs 5 KV pages but its tenant's quota is 4/);
});

interface Candidate extends AdmissionCandidate {
  readonly name: string;
}

const candidate = (name: string, pagesNeeded: number, tenantPagesMax = 100): Candidate => ({
  name,
  tenant: name[0]!,
  pagesNeeded,
  tenantPagesMax,
});

/** A pool of 100 pages: `held` pages and `slots` batch slots per tenant (the shares admission compares). */
function room(
  freePages: number,
  held: Record<string, number> = {},
  runningMax = 100,
  running = 0,
  slots: Record<string, number> = {},
): AdmissionRoom {
  return {
    running,
    runningMax,
    freePages,
    poolPages: 100,
    pagesOfTenant: (tenant) => held[tenant] ?? 0,
    slotsOfTenant: (tenant) => slots[tenant] ?? 0,
  };
}

const names = (admitted: readonly Candidate[]) => admitted.map((c) => c.name);

test('a tenant at its quota waits in its own order while other tenants pass', () => {
  const queue = [candidate('a1', 2, 10), candidate('a2', 1, 10), candidate('b1', 3), candidate('a3', 1, 10)];
  queue.push(candidate('c1', 3));
  // a holds 9 of 10: a1 (2) does not fit its quota; a2 and a3 (1 each) would, but must not pass a1
  assert.deepEqual(names(pickAdmissions(queue, room(50, { a: 9 }))), ['b1', 'c1']);
  // within their quotas the tenants take turns, the one holding least first, each in its own order
  assert.deepEqual(names(pickAdmissions(queue, room(50, { a: 0 }))), ['a1', 'b1', 'c1', 'a2', 'a3']);
});

test('the tenant holding least goes first: one inside its limits cannot keep another out of the batch or the pool', () => {
  // a holds 31 of 32 slots and asked first; one slot is free: b, holding nothing, takes it
  const slots = [candidate('a5', 1), candidate('a6', 1), candidate('b1', 1)];
  assert.deepEqual(names(pickAdmissions(slots, room(50, { a: 31 }, 32, 31, { a: 31 }))), ['b1']);
  // a holds 95 of the 100 pages and its next request wants 10 of the 5 free: b's one page passes it
  const pages = [candidate('a20', 10), candidate('b1', 1)];
  assert.deepEqual(names(pickAdmissions(pages, room(5, { a: 95 }, 32, 19, { a: 19 }))), ['b1']);
  // the share is the larger of slots and pages: b holds 40 pages in one slot, a 16 slots of 32 with a page each
  const mixed = [candidate('a9', 1), candidate('b2', 1)];
  assert.deepEqual(names(pickAdmissions(mixed, room(50, { a: 16, b: 40 }, 32, 31, { a: 16, b: 1 }))), ['b2']);
});

test('the request chosen waits for room, and everyone with it: nothing passes it for being small', () => {
  const queue = [candidate('b0', 1), candidate('a1', 6), candidate('b1', 1), candidate('c1', 1)];
  assert.deepEqual(names(pickAdmissions(queue, room(5))), ['b0']);
  assert.deepEqual(names(pickAdmissions(queue, room(7))), ['b0', 'a1']);
});

test('runningMax bounds the number admitted, counting those already running', () => {
  const queue = [candidate('a1', 1), candidate('b1', 1), candidate('c1', 1), candidate('d1', 1)];
  assert.deepEqual(names(pickAdmissions(queue, room(50, {}, 3, 1))), ['a1', 'b1']);
  assert.deepEqual(pickAdmissions(queue, room(50, {}, 3, 3)), []);
});

test('a tenant at its quota waits without holding others, even when it asks for more slots than are free', () => {
  // a holds its whole quota and asks for 4 slots (n = 4) with 3 free: it waits on its quota; b passes it
  const queue: Candidate[] = [{ ...candidate('a2', 4, 10), slots: 4 }, candidate('b1', 1)];
  assert.deepEqual(names(pickAdmissions(queue, room(100, { a: 10 }, 4, 1))), ['b1']);
  // within its quota the same request stops the pass: the batch has no room for it yet
  assert.deepEqual(names(pickAdmissions(queue, room(100, { a: 0 }, 4, 1))), []);
});

test('pages admitted in the same pass count against the tenant quota and the free pages', () => {
  // a's quota is 5 and it holds 1: a1 (2) fits, a2 (2) fits (1+2+2 = 5), a3 (1) does not (6); b, holding none, first
  const quota = [candidate('a1', 2, 5), candidate('a2', 2, 5), candidate('a3', 1, 5), candidate('b1', 1)];
  assert.deepEqual(names(pickAdmissions(quota, room(50, { a: 1 }))), ['b1', 'a1', 'a2']);
  // 6 pages free: a1 (3) and b1 (3) take them all; c1 (1) no longer fits and stops the pass
  const pool = [candidate('a1', 3), candidate('b1', 3), candidate('c1', 1)];
  assert.deepEqual(names(pickAdmissions(pool, room(6))), ['a1', 'b1']);
});

test('a pass that stops for batch slots alone names the request it stopped at; one that stops for pages does not', () => {
  const queue = [candidate('a5', 1), candidate('b1', 2)];
  const full = admissionPass(queue, room(50, { a: 8 }, 8, 8, { a: 8 }));
  assert.deepEqual([names(full.admitted), full.waitsForSlots?.name], [[], 'b1']);
  const noPages = admissionPass(queue, room(1, { a: 8 }, 8, 8, { a: 8 }));
  assert.deepEqual([names(noPages.admitted), noPages.waitsForSlots], [[], undefined]);
  const room2 = admissionPass(queue, room(50, { a: 8 }, 8, 6, { a: 6 }));
  assert.deepEqual([names(room2.admitted), room2.waitsForSlots?.name], [['b1', 'a5'], undefined]);
});

test('a request waiting for pages holds back every waiting request, but not a paused sequence (it needs none)', () => {
  const paused = (name: string): Candidate => ({ ...candidate(name, 0, Infinity), resumes: true });
  // b1 (holding least) wants 30 pages, 20 are free: a6 waits with it, a's paused a2 and a3 take the free slots
  const queue = [paused('a2'), paused('a3'), candidate('a6', 1), candidate('b1', 30)];
  const pass = admissionPass(queue, room(20, { a: 60 }, 4, 2, { a: 2 }));
  assert.deepEqual([names(pass.admitted), pass.waitsForSlots], [['a2', 'a3'], undefined]);
  // one slot free: one of them; none free: none, and nothing pauses for them while b1 waits for pages
  const one = admissionPass(queue, room(20, { a: 60 }, 4, 3, { a: 3 }));
  assert.deepEqual([names(one.admitted), one.waitsForSlots], [['a2'], undefined]);
  const none = admissionPass(queue, room(20, { a: 60 }, 4, 4, { a: 4 }));
  assert.deepEqual([names(none.admitted), none.waitsForSlots], [[], undefined]);
});

test('slotDonors: the tenant running most pauses for one running less, never below it, never for a larger share', () => {
  const b1 = candidate('b1', 1);
  const pausable = (counts: Record<string, number>) => new Map(Object.entries(counts));
  // a runs all 8 slots: one of its sequences pauses for b's request
  assert.deepEqual(slotDonors(b1, room(50, { a: 8 }, 8, 8, { a: 8 }), pausable({ a: 8 })), ['a']);
  // n = 3: three slots, each from whoever runs most then (a 5 and c 5: a, c, a, each left with at least b's 3)
  const three = slotDonors({ ...b1, slots: 3 }, room(50, {}, 10, 10, { a: 5, c: 5 }), pausable({ a: 5, c: 5 }));
  assert.deepEqual(three, ['a', 'c', 'a']);
  const short = slotDonors({ ...b1, slots: 3 }, room(50, {}, 8, 8, { a: 5, c: 3 }), pausable({ a: 5, c: 3 }));
  assert.equal(short, undefined, 'a third slot would leave a or c below 3');
  // never so far that the two would trade places: a at 4 against b's 3 gives no slot for b's fourth (3 < 4)
  assert.equal(slotDonors(b1, room(50, {}, 7, 7, { a: 4, b: 3 }), pausable({ a: 4, b: 3 })), undefined);
  // at 5 against 3 it does (4 ≥ 4); the waiter's own tenant never pauses for it
  assert.deepEqual(slotDonors(b1, room(50, {}, 8, 8, { a: 5, b: 3 }), pausable({ a: 5, b: 3 })), ['a']);
  // a runs 8 slots of which none can pause (an n > 1 request's choices before they fork)
  assert.equal(slotDonors(b1, room(50, {}, 8, 8, { a: 8 }), pausable({ a: 0 })), undefined);
  // b holds 90 of the 100 pages (a larger share than a's 7 of 8 slots would leave): admission would hand the slot
  // straight back to a's paused sequence, so nobody pauses
  assert.equal(slotDonors(b1, room(10, { b: 90 }, 8, 8, { a: 8 }), pausable({ a: 8 })), undefined);
  // a's paused sequence's turn comes by a's slots alone (its pages are not given back by waiting): at 3 of 8 it would
  // come before b's, holding 45 of the 100 pages, and take the slot back; so a does not pause, its 80 pages whatever
  assert.equal(slotDonors(b1, room(50, { a: 80, b: 45 }, 8, 8, { a: 4, b: 1 }), pausable({ a: 4 })), undefined);
  // more slots short than the donors can give: nobody pauses at all
  assert.equal(slotDonors({ ...b1, slots: 4 }, room(50, {}, 4, 4, { a: 4 }), pausable({ a: 4 })), undefined);
});

test('property: admission respects free pages, runningMax, quotas, each tenant order, and goes to the least held', () => {
  const TENANTS = ['a', 'b', 'c'];
  const perTenant = (n: number) => fc.record({ a: fc.nat(n), b: fc.nat(n), c: fc.nat(n) });
  const scenario = fc.record({
    queue: fc.array(fc.record({ tenant: fc.constantFrom(...TENANTS), pagesNeeded: fc.integer({ min: 1, max: 5 }) }), {
      maxLength: 12,
      size: 'max',
    }),
    quota: fc.record({
      a: fc.integer({ min: 1, max: 12 }),
      b: fc.integer({ min: 1, max: 12 }),
      c: fc.integer({ min: 1, max: 12 }),
    }),
    held: perTenant(5),
    slots: perTenant(2),
    freePages: fc.nat(24),
    runningMax: fc.integer({ min: 1, max: 8 }),
  });
  let admittedTotal = 0;
  let passed = 0; // runs where a later request was admitted while an earlier one waited
  fc.assert(
    fc.property(scenario, (s) => {
      const quota: Record<string, number> = s.quota;
      const held: Record<string, number> = s.held;
      const slotsHeld: Record<string, number> = s.slots;
      const running = TENANTS.reduce((sum, t) => sum + slotsHeld[t]!, 0);
      const queue = s.queue.map((q, i) => ({ ...q, name: `${q.tenant}${i}`, tenantPagesMax: quota[q.tenant]! }));
      const admitted = pickAdmissions(queue, room(s.freePages, held, s.runningMax, running, slotsHeld));
      admittedTotal += admitted.length;
      const positions = admitted.map((c) => queue.indexOf(c));
      if (positions.some((p, i) => p !== i)) passed++;
      assert.equal(new Set(positions).size, positions.length, 'each candidate once');
      assert.ok(admitted.reduce((sum, c) => sum + c.pagesNeeded, 0) <= s.freePages, 'free pages');
      assert.ok(admitted.length <= Math.max(0, s.runningMax - running), 'runningMax');
      for (const tenant of TENANTS) {
        const mine = admitted.filter((c) => c.tenant === tenant);
        const added = mine.reduce((sum, c) => sum + c.pagesNeeded, 0);
        if (mine.length > 0) assert.ok(held[tenant]! + added <= quota[tenant]!, `quota of ${tenant}`);
        // the tenant's admitted requests are a prefix of its queued ones: none passed an earlier one that waits
        const queued = queue.filter((c) => c.tenant === tenant);
        assert.deepEqual(mine, queued.slice(0, mine.length), `order of ${tenant}`);
      }
      // the first admitted is the head of a tenant holding least among those whose head its quota lets through
      const share = (t: string) => Math.max(slotsHeld[t]! / s.runningMax, held[t]! / 100);
      const heads = TENANTS.map((t) => queue.find((c) => c.tenant === t)).filter(
        (c): c is (typeof queue)[number] => c !== undefined && held[c.tenant]! + c.pagesNeeded <= c.tenantPagesMax,
      );
      const least = Math.min(...heads.map((c) => share(c.tenant)));
      const first = heads
        .filter((c) => share(c.tenant) === least)
        .sort((x, y) => queue.indexOf(x) - queue.indexOf(y))[0];
      if (admitted.length > 0) assert.equal(admitted[0], first, 'the least held goes first');
      // not vacuous: that head, when it fits, is admitted
      if (first !== undefined && running < s.runningMax && first.pagesNeeded <= s.freePages)
        assert.equal(admitted[0], first, 'a head that fits is admitted');
    }),
    { numRuns: 500, seed: 20260610 },
  );
  assert.ok(admittedTotal > 300 && passed > 100, `admitted: ${admittedTotal}, runs with a pass: ${passed}`);
});
