// Every sampling option through the engine against an independent reference: a plain loop over the forward pass that
// applies the option's documented formula to the raw logits and takes the argmax (exact expectations, greedy); then
// every option — greedy and seeded-sampled — alone vs all together in one batch: bit-identical tokens and logprobs (I7).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { config, model, runToEnd } from '../../test/helpers/engine-run.js';
import { forwardFor } from '../../test/helpers/models.js';
import { pagesForTokens } from '../kv/kv-layout.js';
import { newPageTable } from '../kv/page-table.js';
import { Engine } from './engine.js';
import type { GenerationRequest } from './request.js';
import { argmax, GREEDY, type SamplingParams } from './sampler.js';

const PROMPT = [5, 42, 42, 99, 7, 300, 42, 18];
const MAX = 12;

/** Greedy tokens of the raw model (no options): the stop tokens below are picked from it. */
function plainRun(): number[] {
  return reference(
    (x) => x,
    () => false,
  );
}

/**
 * The reference: prefill the prompt, then each step `transform` the raw logits (given the output so far), take the
 * argmax; a token for which `stops` holds ends the output without being part of it.
 */
function reference(
  transform: (logits: Float32Array, output: readonly number[]) => Float32Array,
  stops: (id: number, output: readonly number[]) => boolean,
): number[] {
  const forward = forwardFor(model, 16, 16);
  const table = newPageTable({ tenant: 'ref', request: 'ref' });
  assert.ok(forward.pool.grow(table, pagesForTokens(forward.pool.layout, PROMPT.length + MAX)));
  const run = (tokens: number[]) => {
    const [out] = forward.run([{ table, tokens, logits: 'last' }]);
    assert.ok(out?.ok);
    return out.logits;
  };
  let logits = run(PROMPT);
  const output: number[] = [];
  while (output.length < MAX) {
    const id = argmax(transform(Float32Array.from(logits), output));
    if (stops(id, output)) break;
    output.push(id);
    logits = run([id]);
  }
  forward.pool.releaseAll(table);
  return output;
}

function counts(output: readonly number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const t of output) m.set(t, (m.get(t) ?? 0) + 1);
  return m;
}

const plain = plainRun();
const EOS = plain[3]!; // a token the model writes by itself: the engine's end-of-generation token below

function engineRun(requests: GenerationRequest[]) {
  const engine = new Engine(config({ isStopToken: (id) => id === EOS }), forwardFor(model, 64, 16));
  for (const r of requests) engine.submit(r, 0);
  return runToEnd(engine);
}

function request(id: string, sampling: Partial<SamplingParams>): GenerationRequest {
  return {
    id,
    tenant: `t-${id}`,
    promptTokens: PROMPT,
    maxTokens: MAX,
    sampling: { ...GREEDY, ...sampling },
    topLogprobs: 2,
    tenantKvPagesMax: 64,
  };
}

const eosStops = (id: number) => id === EOS;

describe('sampling options against the reference loop (exact)', () => {
  const cases: [
    string,
    Partial<SamplingParams>,
    (x: Float32Array, out: readonly number[]) => Float32Array,
    (id: number, out: readonly number[]) => boolean,
  ][] = [
    ['plain greedy stops at end-of-generation', {}, (x) => x, eosStops],
    [
      'frequency_penalty',
      { frequencyPenalty: 1.5, ignoreEos: true },
      (x, out) => {
        for (const [t, c] of counts(out)) x[t] = x[t]! - (1.5 * c + 0);
        x[EOS] = Number.NEGATIVE_INFINITY;
        return x;
      },
      () => false,
    ],
    [
      'presence_penalty',
      { presencePenalty: 2, ignoreEos: true },
      (x, out) => {
        for (const [t] of counts(out)) x[t] = x[t]! - (0 * 1 + 2);
        x[EOS] = Number.NEGATIVE_INFINITY;
        return x;
      },
      () => false,
    ],
    [
      'repetition_penalty over prompt and output',
      { repetitionPenalty: 1.8 },
      (x, out) => {
        for (const t of new Set([...out, ...PROMPT])) x[t] = x[t]! > 0 ? x[t]! / 1.8 : x[t]! * 1.8;
        return x;
      },
      eosStops,
    ],
    [
      'logit_bias +100 forces a token',
      { logitBias: [[77, 100]] },
      (x) => {
        x[77] = x[77]! + 100;
        return x;
      },
      eosStops,
    ],
    [
      'logit_bias -100 forbids the greedy choice',
      { logitBias: [[plain[0]!, -100]] },
      (x) => {
        x[plain[0]!] = x[plain[0]!]! - 100;
        return x;
      },
      eosStops,
    ],
    [
      'min_tokens holds end-of-generation back (forced by a +100 bias) for 5 tokens',
      { minTokens: 5, logitBias: [[EOS, 100]] },
      (x, out) => {
        x[EOS] = out.length < 5 ? Number.NEGATIVE_INFINITY : x[EOS]! + 100;
        return x;
      },
      eosStops,
    ],
    [
      'ignore_eos never draws end-of-generation',
      { ignoreEos: true, logitBias: [[EOS, 100]] },
      (x) => {
        x[EOS] = Number.NEGATIVE_INFINITY;
        return x;
      },
      () => false,
    ],
    [
      'stop_token_ids end the output',
      { ignoreEos: true, stopTokenIds: [plain[1]!] },
      (x) => {
        x[EOS] = Number.NEGATIVE_INFINITY;
        return x;
      },
      (id) => id === plain[1],
    ],
  ];
  for (const [name, sampling, transform, stops] of cases) {
    test(name, () => {
      const expected = reference(transform, stops);
      const got = engineRun([request('r', sampling)]).get('r')!;
      assert.deepEqual(got.tokens, expected);
      const end = got.end?.kind === 'end' ? got.end.end : undefined;
      assert.equal(end?.kind === 'finished' ? end.reason : undefined, expected.length < MAX ? 'stop' : 'length');
    });
  }

  test('the expectations are not trivial: the options change the output', () => {
    const stopped = engineRun([request('p', {})]).get('p')!.tokens;
    assert.equal(stopped.length, plain.indexOf(EOS), 'the plain run stops at its own end-of-generation token');
    assert.ok(stopped.length < MAX);
    const frequency = engineRun([request('f', { frequencyPenalty: 1.5, ignoreEos: true })]).get('f')!.tokens;
    const ignore = engineRun([request('i', { ignoreEos: true })]).get('i')!.tokens;
    assert.notDeepEqual(frequency, ignore);
    assert.deepEqual(engineRun([request('b', { logitBias: [[77, 100]] })]).get('b')!.tokens, Array(MAX).fill(77));
  });
});

test('I7: every option, greedy and sampled, alone and all in one batch: bit-identical tokens and logprobs', () => {
  const options: Partial<SamplingParams>[] = [
    { frequencyPenalty: 1.2, ignoreEos: true },
    { presencePenalty: -0.5, repetitionPenalty: 1.3 },
    {
      logitBias: [
        [3, 5],
        [EOS, -100],
      ],
    },
    { minTokens: 4 },
    { stopTokenIds: [plain[2]!] },
    { temperature: 1.1, seed: 7, frequencyPenalty: 0.6, ignoreEos: true },
    { temperature: 0.8, topK: 40, topP: 0.9, seed: 8, repetitionPenalty: 1.2, minTokens: 6 },
    { temperature: 1.5, seed: 9, logitBias: [[plain[0]!, 3]], stopTokenIds: [12] },
  ];
  const requests = options.map((o, i) => request(`o${i}`, o));
  const together = engineRun(requests);
  for (const r of requests) {
    const alone = engineRun([r]).get(r.id)!;
    assert.deepEqual(together.get(r.id), alone, r.id);
  }
});

test('logits a broken model file makes NaN fail that request with a clear error; the engine runs on', () => {
  // a file whose weights or settings overflow f32 computes NaN: sampling asserted (stopping a server's engine thread)
  // and greedy decoding quietly took token 0
  const broken = new Set(['greedy', 'sampled', 'penalised']);
  const forward = forwardFor(model, 64, 16);
  const run = forward.run.bind(forward);
  forward.run = (inputs) =>
    run(inputs).map((out, i) => {
      if (out.ok && broken.has(inputs[i]!.table.owner.request)) out.logits.fill(Number.NaN, 0, 7);
      return out;
    });
  const engine = new Engine(config(), forward);
  const sampled = { temperature: 0.8, seed: 5 };
  for (const r of [
    request('greedy', {}),
    request('sampled', sampled),
    request('penalised', { ...sampled, presencePenalty: 0.5 }),
    request('fine', {}),
  ])
    engine.submit(r, 0);
  const outcomes = runToEnd(engine);
  for (const id of broken) {
    const end = outcomes.get(id)?.end;
    assert.ok(end?.kind === 'end' && end.end.kind === 'failed', `${id} failed`);
    assert.equal(end.end.error.code, 'internal_error');
    assert.match(end.end.error.message, /computed a logit of NaN \(token 0\)/);
  }
  assert.equal(outcomes.get('fine')?.tokens.length, MAX);
  assert.equal(forward.pool.checkConservation().free, 64);
});
