import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { tokenizerFromGguf } from '../model/tokenizer.js';
import { buildTestVocabulary } from '../model/vocab-build.js';
import { grammarCacheFor } from '../structured/grammar-cache.js';
import { KvfenceError } from '../util/errors.js';
import { SeededRandom } from '../util/random.js';
import { applyLogitProcessing } from './logits-processors.js';
import type { GenerationRequest } from './request.js';
import { GREEDY, type SamplingParams, SamplingScratch } from './sampler.js';
import { SequenceSampler, samplingEnv, type TokenChoice } from './sequence-sampler.js';

const EOS = 9;
const env = samplingEnv(10, (id) => id === EOS);
const scratch = new SamplingScratch(10);

function request(sampling: Partial<SamplingParams>, extra: Partial<GenerationRequest> = {}): GenerationRequest {
  return {
    id: 'r',
    tenant: 't',
    promptTokens: [1, 2, 2],
    maxTokens: 8,
    sampling: { ...GREEDY, ...sampling },
    topLogprobs: 0,
    tenantKvPagesMax: 64,
    ...extra,
  };
}

function ids(choices: TokenChoice[]): (number | string)[] {
  return choices.map((c) => (c.kind === 'token' ? c.id : c.kind));
}

describe('logits processing', () => {
  it('bias, then repetition over prompt and output, then frequency and presence, exactly', () => {
    const x = Float32Array.from([1, 2, -2, 0.5, 0, 0, 0, 0, 0, 0]);
    applyLogitProcessing(
      x,
      { ...GREEDY, logitBias: [[0, 1]], repetitionPenalty: 2, frequencyPenalty: 0.5, presencePenalty: 0.25 },
      { prompt: new Set([1, 2]), output: new Map([[3, 2]]) },
    );
    // 0: 1+1 (bias only); 1: 2/2 (prompt, positive); 2: -2*2 (prompt, negative); 3: 0.5/2 - (0.5*2 + 0.25)
    assert.deepEqual(Array.from(x.subarray(0, 4)), [2, 1, -4, 0.25 - 1.25]);
  });
});

describe('SequenceSampler', () => {
  const flat = Float32Array.from([0, 5, 4, 3, 2, 1, 0, 0, 0, 8]); // EOS most likely, then 1, 2, 3 …

  it('stops at end-of-generation, not before min_tokens, never with ignore_eos', () => {
    assert.deepEqual(ids([new SequenceSampler(request({}), env).choose(flat, scratch)]), ['stop']);
    const min = new SequenceSampler(request({ minTokens: 2 }), env);
    assert.deepEqual(ids([min.choose(flat, scratch), min.choose(flat, scratch), min.choose(flat, scratch)]), [
      1,
      1,
      'stop',
    ]);
    const ignore = new SequenceSampler(request({ ignoreEos: true }), env);
    assert.deepEqual(ids([ignore.choose(flat, scratch), ignore.choose(flat, scratch)]), [1, 1]);
  });

  it('stop_token_ids end the output; frequency penalties move greedy choices; +100 bias forces, -100 forbids', () => {
    const stops = new SequenceSampler(request({ ignoreEos: true, stopTokenIds: [1] }), env);
    assert.deepEqual(ids([stops.choose(flat, scratch)]), ['stop']);
    const freq = new SequenceSampler(request({ ignoreEos: true, frequencyPenalty: 2 }), env);
    // 1 (5, then 3); 2 (4, then 2); 1 and 3 tie at 3: the lower id, 1 (then 1); 3
    assert.deepEqual(ids(Array.from({ length: 4 }, () => freq.choose(flat, scratch))), [1, 2, 1, 3]);
    const forced = new SequenceSampler(request({ temperature: 1, seed: 3, logitBias: [[6, 100]] }), env);
    assert.deepEqual(ids(Array.from({ length: 5 }, () => forced.choose(flat, scratch))), [6, 6, 6, 6, 6]);
    const forbidden = new SequenceSampler(request({ logitBias: [[EOS, -100]] }), env);
    assert.deepEqual(ids([forbidden.choose(flat, scratch)]), [1]);
  });

  it('refuses options out of range with a 400 naming the parameter', () => {
    const refused = (sampling: Partial<SamplingParams>, param: string) =>
      assert.throws(
        () => new SequenceSampler(request(sampling), env),
        (e: unknown) => e instanceof KvfenceError && e.code === 'invalid_request_error' && e.param === param,
      );
    refused({ logitBias: [[10, 1]] }, 'logit_bias');
    refused({ logitBias: [[1, 101]] }, 'logit_bias');
    refused({ stopTokenIds: [-1] }, 'stop_token_ids');
    refused({ frequencyPenalty: 3 }, 'frequency_penalty');
    refused({ repetitionPenalty: 0 }, 'repetition_penalty');
    refused({ minTokens: 9 }, 'min_tokens');
    assert.throws(
      () => new SequenceSampler(request({}, { constraint: { kind: 'json_object' } }), env),
      (e: unknown) => e instanceof KvfenceError && e.param === 'response_format',
    );
  });

  it('a replayed first token continues exactly as if drawn here (draws, history, grammar)', () => {
    const tokenizer = tokenizerFromGguf(buildTestVocabulary({ kind: 'gpt2', pre: 'smollm', vocabSize: 600, seed: 2 }));
    const genv = samplingEnv(600, (id) => tokenizer.isEndOfGeneration(id), grammarCacheFor(tokenizer));
    const big = new SamplingScratch(600);
    const random = new SeededRandom(1);
    const steps = Array.from({ length: 12 }, () => Float32Array.from({ length: 600 }, () => random.normal()));
    const r = request(
      { temperature: 0.9, seed: 77, frequencyPenalty: 0.7, repetitionPenalty: 1.3 },
      {
        promptTokens: [5, 6],
        maxTokens: 12,
        constraint: { kind: 'json_schema', schema: { type: 'array', items: { type: 'integer' } } },
      },
    );
    const whole = new SequenceSampler(r, genv);
    const colocated = steps.map((l) => whole.choose(l, big));
    const prefill = new SequenceSampler(r, genv).choose(steps[0]!, big);
    assert.deepEqual(prefill, colocated[0]);
    const decode = new SequenceSampler(r, genv);
    assert.deepEqual(decode.replay((prefill as { id: number }).id), colocated[0]);
    const rest = steps.slice(1).map((l) => decode.choose(l, big));
    assert.deepEqual(rest, colocated.slice(1));
    assert.equal(decode.replay(0).kind, 'failed', 'a first token the grammar cannot take is refused');
  });
});
