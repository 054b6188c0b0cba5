/**
 * Prompt-cache timing (Gu et al., "Auditing Prompt Caching in Language Model APIs", ICML 2025): does a tenant's
 * prompt make another tenant's request with the same prefix faster? A cache shared across tenants is a side channel:
 * an attacker learns whether someone else sent a prompt, from time to first token (TTFT) alone.
 *
 * Calibration: tokens per word (usage, or /tokenize), then streamed TTFT of a short prompt and of the longest prefix
 * that fits, interleaved; the prefix length is set from that measured prefill speed so that a cache holding the
 * prefix saves about TARGET_SAVING (or 12 sigmas of the short prompts' TTFT) and at most SAVING_MAX. What a hit
 * would save is then measured, not extrapolated: the misses' median TTFT minus the short prompts'.
 *
 * Then, for each ordered pair (victim, attacker), `cacheSamples` rounds, all requests sequential and streamed with
 * max_tokens 1: the victim sends a fresh random prefix P + suffix (priming any cache; every prefix starts with a
 * marker new to this run, so that no cache can know it from an earlier audit), then in random order
 *   attack  the attacker sends P + another suffix                    (a hit only if the cache is shared)
 *   hit     the victim sends P + a third suffix                      (a hit if the server caches at all)
 *   miss    the attacker sends a fresh prefix Q + suffix, same length (never a hit)
 * and the TTFT of each is one sample. Decisions, by exact one-sided two-sample KS tests (ks-test.ts), each at
 * FAMILY_ALPHA / pairs (Bonferroni: the chance of any false finding in the audit is at most FAMILY_ALPHA):
 *   attack faster than miss                      → finding prompt_cache_shared_across_tenants
 *   else hit faster than miss, attack slower than hit → pass: the server caches within a tenant only
 *   else hit faster than miss, attack in between      → cannot certify (partly shared?)
 *   else a hint of a speed-up (hit or attack faster than miss at p ≤ HINT_P, short of the corrected level)
 *        → cannot certify: a real cache whose saving the noise half hides must not pass as "no cache"
 *   else no difference: if a speed-up of the detectable size (POWER from the measured misses) is at most the
 *        expected saving → pass: no cache detected; otherwise the noise is too high → cannot certify.
 * Under the null hypothesis (no sharing) attack and miss requests are exchangeable (same tenant, same length, fresh
 * computation, random position in the round), so the exact KS p-value bounds the false-positive rate.
 */
import type { AuditContext } from './audit-context.js';
import { makeMarker } from './canary.js';
import { type CallRecord, completed } from './endpoint.js';
import { type ScenarioResult, settle } from './findings.js';
import type { AuditTenant } from './keys-file.js';
import { detectableShift, ksCriticalCount, ksFaster, median } from './ks-test.js';
import { measurePromptSize } from './prompt-size.js';
import type { CachePairTiming, CachePairVerdict, PromptCacheTiming } from './timing-data.js';

export const FAMILY_ALPHA = 1e-6;
/** Below this (uncorrected) a faster hit or attack is a hint of a cache: never certified as "no cache". */
const HINT_P = 1e-3;
export const POWER = 0.9;
const TARGET_SAVING_MS = 80;
const SAVING_MAX_MS = 2000;
const PREFIX_TOKENS_MAX = 4096;
const PREFIX_TOKENS_MIN = 64;
const SUFFIX_WORDS = 6;
const CALIBRATION_ROUNDS = 5;
const CALIBRATION_ROUNDS_STEP = 3;
const CALIBRATION_STEPS_MAX = 3;
/** tokens kept free below the context: template tokens, the suffix's tokenization at a word boundary */
const CONTEXT_MARGIN_TOKENS = 48;

interface Plan {
  prefixWords: number;
  prefixTokens: number;
  /** median TTFT of a short prompt (the suffix alone): what a hit of the whole prefix would come down to */
  shortMs: number;
}

export async function runPromptCache(
  ctx: AuditContext,
  result: ScenarioResult,
  context: number | undefined,
): Promise<ScenarioResult> {
  const pairs = pickPairs(ctx);
  const n = ctx.settings.cacheSamples;
  const testAlpha = FAMILY_ALPHA / pairs.length;
  ctx.progress.start('prompt_cache', 2 + CALIBRATION_ROUNDS * 2 + 6 + pairs.length * n * 4);
  if (ksCriticalCount(n, testAlpha) > n) {
    result.notes.push(
      `${n} samples a procedure cannot reach p <= ${testAlpha.toExponential(1)}: raise --cache-samples`,
    );
    return settle(result, true);
  }
  const plan = await calibrate(ctx, result, context);
  if (plan === undefined) return settle(result, true);
  const samples = pairs.map(() => ({ miss: [] as number[], hit: [] as number[], attack: [] as number[] }));
  const calls = pairs.map(() => ({ prime: 0, attack: 0 }));
  let dropped = 0;
  for (let round = 0; round < n + Math.ceil(n / 4) && samples[0]!.miss.length < n; round++) {
    for (let p = 0; p < pairs.length; p++) {
      const [victim, attacker] = pairs[p]!;
      const prefix = freshPrefix(ctx, plan.prefixWords);
      const prime = await ttftCall(ctx, result, victim, `prime (${victim.name})`, `${prefix} ${suffix(ctx)}`);
      const steps: [keyof (typeof samples)[number], AuditTenant, string][] = [
        ['attack', attacker, `${prefix} ${suffix(ctx)}`],
        ['hit', victim, `${prefix} ${suffix(ctx)}`],
        ['miss', attacker, `${freshPrefix(ctx, plan.prefixWords)} ${suffix(ctx)}`],
      ];
      const measured = new Map<string, CallRecord>();
      for (const [kind, tenant, prompt] of ctx.shuffle(steps)) {
        measured.set(kind, await ttftCall(ctx, result, tenant, `${kind} of ${victim.name}'s prefix`, prompt));
      }
      const times = ['attack', 'hit', 'miss'].map((k) => ttftOf(measured.get(k)!));
      if (ttftOf(prime) === undefined || times.some((t) => t === undefined)) {
        dropped++;
        continue;
      }
      if (samples[p]!.miss.length >= n) continue;
      samples[p]!.attack.push(times[0]!);
      samples[p]!.hit.push(times[1]!);
      samples[p]!.miss.push(times[2]!);
      if (calls[p]!.prime === 0) calls[p] = { prime: prime.id, attack: measured.get('attack')!.id };
    }
  }
  if (dropped > 0) result.notes.push(`${dropped} rounds dropped: a request failed or streamed no token`);
  const expectedSavingMs = Math.max(0, median(samples.flatMap((x) => x.miss)) - plan.shortMs);
  const timing: PromptCacheTiming = {
    prefixTokens: plan.prefixTokens,
    prefixWords: plan.prefixWords,
    expectedSavingMs,
    samplesPerProcedure: n,
    familyAlpha: FAMILY_ALPHA,
    testAlpha,
    power: POWER,
    pairs: [],
  };
  ctx.timing.promptCache = timing;
  let undecided = 0;
  for (let p = 0; p < pairs.length; p++) {
    const [victim, attacker] = pairs[p]!;
    const s = samples[p]!;
    if (s.miss.length < n) {
      undecided++;
      result.notes.push(`${victim.name} -> ${attacker.name}: only ${s.miss.length} of ${n} rounds measured`);
      continue;
    }
    const pair = decide(ctx, victim.name, attacker.name, s, expectedSavingMs, testAlpha);
    timing.pairs.push(pair);
    if (pair.verdict === 'cannot_certify') undecided++;
    if (pair.verdict === 'shared') {
      result.findings.push({
        kind: 'prompt_cache_shared_across_tenants',
        scenario: 'prompt_cache',
        summary:
          `${attacker.name}'s requests with ${victim.name}'s prompt prefix were answered faster than fresh ones ` +
          `(median TTFT ${fmt(median(s.attack))} vs ${fmt(median(s.miss))} ms, KS p = ${pair.pAttackFaster.toExponential(1)})`,
        tenants: [attacker.name, victim.name],
        calls: [calls[p]!.attack, calls[p]!.prime],
        evidence: {
          victim: victim.name,
          attacker: attacker.name,
          prefixTokens: plan.prefixTokens,
          samples: n,
          medianAttackMs: round1(median(s.attack)),
          medianMissMs: round1(median(s.miss)),
          medianVictimHitMs: round1(median(s.hit)),
          ksStatistic: round3(ksFaster(s.attack, s.miss).statistic),
          pValue: pair.pAttackFaster,
          alphaPerTest: testAlpha,
          primeCall: calls[p]!.prime,
          attackCall: calls[p]!.attack,
        },
      });
    }
    result.notes.push(pairNote(pair, s, testAlpha));
  }
  result.notes.unshift(
    `${pairs.length} tenant pairs x ${n} rounds; prefix ${plan.prefixTokens} tokens (a hit would save ` +
      `${fmt(expectedSavingMs)} ms: misses' median TTFT - short prompts'); exact one-sided KS at ${testAlpha.toExponential(1)} a test ` +
      `(family-wise ${FAMILY_ALPHA}); detectable with power ${POWER}: ${timing.pairs.map((x) => `${fmt(x.detectableMs)} ms`).join(', ')}`,
  );
  return settle(result, undecided > 0);
}

/**
 * Every ordered pair when there are at most `cachePairs` (tenants in key-file order); else a seeded cycle (each chosen
 * tenant the victim once, the next one its attacker), cut to `cachePairs`.
 */
function pickPairs(ctx: AuditContext): [AuditTenant, AuditTenant][] {
  const t = ctx.tenants;
  const max = ctx.settings.cachePairs;
  const all: [AuditTenant, AuditTenant][] = [];
  for (const victim of t) for (const attacker of t) if (victim !== attacker) all.push([victim, attacker]);
  if (all.length <= max) return all;
  const order = t.length === 2 ? [...t] : ctx.shuffle([...t]);
  return order.slice(0, max).map((victim, i) => [victim, order[(i + 1) % order.length]!]);
}

/**
 * `words` filler words after a random marker that is new to this run (node:crypto, not the seeded plan): a prefix
 * the endpoint cannot have cached, even from an earlier audit with the same seed against a cache that persists (a
 * tenant's own cached attack prefix from a previous run would otherwise look like a shared cache).
 */
function freshPrefix(ctx: AuditContext, words: number): string {
  return `${makeMarker().slice(0, 12)} ${ctx.words(Math.max(0, words - 1))}`;
}

function suffix(ctx: AuditContext): string {
  return `${ctx.words(SUFFIX_WORDS)}.`;
}

async function ttftCall(
  ctx: AuditContext,
  result: ScenarioResult,
  tenant: AuditTenant,
  label: string,
  prompt: string,
): Promise<CallRecord> {
  return ctx.call(
    { tenant, scenario: 'prompt_cache', label, prompt, maxTokens: 1, stream: true, greedy: false },
    result,
  );
}

function ttftOf(record: CallRecord): number | undefined {
  return completed(record) ? (record.firstTokenMs ?? record.elapsedMs) : undefined;
}

/** Sets the prefix length from the endpoint's measured prefill speed; undefined (with a note) when it cannot. */
async function calibrate(
  ctx: AuditContext,
  result: ScenarioResult,
  context: number | undefined,
): Promise<Plan | undefined> {
  const tenant = ctx.tenants[0]!;
  const size = await measurePromptSize(ctx, result, tenant);
  if (size === undefined) return undefined;
  const { perWord } = size;
  const suffixTokens = Math.ceil((SUFFIX_WORDS + 1) * perWord + size.base);
  const fitTokens = Math.min(
    PREFIX_TOKENS_MAX,
    context === undefined ? 512 : context - suffixTokens - 1 - CONTEXT_MARGIN_TOKENS,
  );
  if (fitTokens < PREFIX_TOKENS_MIN) {
    result.notes.push(`the context (${context}) leaves no room for a ${PREFIX_TOKENS_MIN}-token prefix`);
    return undefined;
  }
  const longWords = Math.floor(fitTokens / perWord);
  const minWords = Math.ceil(PREFIX_TOKENS_MIN / perWord);
  const short: number[] = [];
  /** median TTFT added by a prefix of `words`, from `rounds` interleaved short/long pairs (short ones kept) */
  const addedBy = async (words: number, rounds: number): Promise<number | undefined> => {
    const long: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const s = ttftOf(await ttftCall(ctx, result, tenant, 'calibrate short', suffix(ctx)));
      const l = ttftOf(
        await ttftCall(ctx, result, tenant, 'calibrate long', `${freshPrefix(ctx, words)} ${suffix(ctx)}`),
      );
      if (s !== undefined) short.push(s);
      if (l !== undefined) long.push(l);
    }
    return short.length >= 3 && long.length * 2 >= rounds ? median(long) - median(short) : undefined;
  };
  const fullSaving = await addedBy(longWords, CALIBRATION_ROUNDS);
  if (fullSaving === undefined) {
    result.notes.push(`calibration failed: short or long prompts were not answered`);
    return undefined;
  }
  const sigma = 1.4826 * median(short.map((x) => Math.abs(x - median(short))));
  const target = Math.min(SAVING_MAX_MS, Math.max(TARGET_SAVING_MS, 12 * sigma));
  // Prefill cost grows faster than linearly (attention), so a length scaled down from the longest one saves less than
  // planned: measure it and scale up until it saves 80% of the target (or the context is full).
  let words = longWords;
  let saving = fullSaving;
  for (let step = 0; step < CALIBRATION_STEPS_MAX && saving > target; step++) {
    const next = Math.max(minWords, Math.floor(words * (target / saving)));
    const measured = await addedBy(next, CALIBRATION_ROUNDS_STEP);
    if (measured === undefined) break;
    words = next;
    saving = measured;
    if (saving < 0.8 * target) {
      words = Math.min(longWords, Math.ceil(words * (target / Math.max(saving, target / 8))));
      break; // the scaled-up length is not measured again: the misses will tell what a hit saves
    }
  }
  const plan = {
    prefixWords: words,
    prefixTokens: Math.round(words * perWord),
    shortMs: median(short),
  };
  result.notes.push(
    `calibration: ${perWord.toFixed(2)} tokens/word; a ${Math.round(longWords * perWord)}-token prefix adds ` +
      `${fmt(fullSaving)} ms to TTFT (short prompts ${fmt(median(short))} ms, sigma ${fmt(sigma)} ms); target ` +
      `saving ${fmt(target)} ms: ${plan.prefixTokens}-token prefixes`,
  );
  return plan;
}

function decide(
  ctx: AuditContext,
  victim: string,
  attacker: string,
  s: { miss: number[]; hit: number[]; attack: number[] },
  expectedSavingMs: number,
  alpha: number,
): CachePairTiming {
  const pAttackFaster = ksFaster(s.attack, s.miss).pValue;
  const pHitFaster = ksFaster(s.hit, s.miss).pValue;
  const pHitFasterThanAttack = ksFaster(s.hit, s.attack).pValue;
  const detectableMs = detectableShift(s.miss, alpha, POWER, ctx.rng.nextU32());
  let verdict: CachePairVerdict;
  if (pAttackFaster <= alpha) verdict = 'shared';
  else if (pHitFaster <= alpha) verdict = pHitFasterThanAttack <= alpha ? 'within_tenant' : 'cannot_certify';
  else if (pHitFaster <= HINT_P || pAttackFaster <= HINT_P) verdict = 'cannot_certify';
  else verdict = detectableMs <= expectedSavingMs ? 'no_cache' : 'cannot_certify';
  return {
    victim,
    attacker,
    missMs: s.miss,
    hitMs: s.hit,
    attackMs: s.attack,
    pAttackFaster,
    pHitFaster,
    pHitFasterThanAttack,
    detectableMs,
    verdict,
  };
}

function pairNote(pair: CachePairTiming, s: { miss: number[]; hit: number[]; attack: number[] }, alpha: number) {
  const head =
    `${pair.victim} -> ${pair.attacker}: median TTFT miss ${fmt(median(s.miss))}, victim hit ` +
    `${fmt(median(s.hit))}, attack ${fmt(median(s.attack))} ms; p(attack<miss) ${pair.pAttackFaster.toExponential(1)}, ` +
    `p(hit<miss) ${pair.pHitFaster.toExponential(1)}, p(hit<attack) ${pair.pHitFasterThanAttack.toExponential(1)}`;
  const tail = {
    shared: 'the cache is SHARED across tenants',
    within_tenant: 'caches within a tenant; the other tenant gets no hit',
    no_cache: `no cache detected (a saving of ${fmt(pair.detectableMs)} ms or more would be seen with power ${POWER})`,
    cannot_certify:
      pair.pHitFaster <= alpha
        ? 'cannot certify: attack times fall between hits and misses'
        : pair.pHitFaster <= HINT_P || pair.pAttackFaster <= HINT_P
          ? 'cannot certify: timing noise too high to tell a hinted speed-up from none'
          : `cannot certify: timing noise too high (detectable saving ${fmt(pair.detectableMs)} ms > what a hit saves)`,
  }[pair.verdict];
  return `${head}: ${tail}`;
}

function fmt(ms: number): string {
  return Number.isFinite(ms) ? ms.toFixed(1) : 'inf';
}

function round1(x: number): number {
  return Math.round(x * 10) / 10;
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
