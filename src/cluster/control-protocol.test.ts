import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvfenceError } from '../util/errors.js';
import { type ControlMessage, decodeControl, encodeControl, endFromWire, endToWire } from './control-protocol.js';

const request = {
  id: 'cmpl-1',
  tenant: 'acme',
  promptTokens: [1, 2, 3],
  maxTokens: 4,
  sampling: { temperature: 0.7, topK: 0, topP: 0.9, seed: 42 },
  topLogprobs: 2,
  tenantKvPagesMax: 64,
};

test('every message survives a round trip, the nonce bytes included', () => {
  const messages: ControlMessage[] = [
    {
      type: 'hello',
      hello: {
        role: 'decode',
        name: 'decode-0',
        modelName: 'm',
        vocabSize: 512,
        layerCount: 2,
        kvDim: 32,
        pageSize: 16,
        provenContext: 256,
        transferAddress: '127.0.0.1:7202',
        endChoice: true,
      },
    },
    { type: 'reserve', request },
    {
      type: 'prefill',
      request,
      decodeAddress: '10.0.0.3:7202',
      ticket: {
        request: 'cmpl-1',
        tenant: 'acme',
        nonce: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
        epoch: 7,
        pageCount: 1,
        tokenCount: 3,
        pageSizeTokens: 16,
        pageBytes: 8192,
      },
    },
    { type: 'token', request: 'cmpl-1', token: { id: 5, logprob: -0.125, top: [{ id: 5, logprob: -0.125 }] } },
    {
      type: 'end',
      request: 'cmpl-1',
      end: { kind: 'finished', reason: 'length', promptTokens: 3, completionTokens: 4 },
    },
    { type: 'end', request: 'cmpl-1', end: { kind: 'failed', code: 'context_length_exceeded', message: 'too long' } },
    { type: 'cancel', request: 'cmpl-1' },
    { type: 'end_choice', request: 'cmpl-1', choice: 2 },
    { type: 'stats', id: 3 },
    { type: 'stats', id: 0, busyMs: 30_000 },
  ];
  for (const m of messages) assert.deepEqual(decodeControl(encodeControl(m)), m);
});

test('a non-finite logprob crosses the wire as it is, not as a malformed message that would end the connection', () => {
  const token = {
    id: 5,
    logprob: Number.NaN,
    top: [
      { id: 7, logprob: Number.POSITIVE_INFINITY },
      { id: 5, logprob: Number.NaN },
      { id: 9, logprob: Number.NEGATIVE_INFINITY },
    ],
  };
  const message: ControlMessage = { type: 'token', request: 'cmpl-1', token };
  assert.deepEqual(decodeControl(encodeControl(message)), message);
  // only a logprob may be one: elsewhere the encoded form is still refused
  const reserve = JSON.parse(Buffer.from(encodeControl({ type: 'reserve', request })).toString('utf8'));
  reserve.request.maxTokens = { number: 'Infinity' };
  assert.throws(() => decodeControl(new Uint8Array(Buffer.from(JSON.stringify(reserve)))), /maxTokens/);
});

test('a malformed message is refused with the field at fault', () => {
  const bytes = (v: unknown) => new Uint8Array(Buffer.from(JSON.stringify(v)));
  assert.throws(() => decodeControl(new Uint8Array(Buffer.from('{not json'))), /not JSON/);
  assert.throws(() => decodeControl(bytes({ type: 'launch' })), /unknown message type/);
  assert.throws(() => decodeControl(bytes({ type: 'reserve', request: { ...request, maxTokens: 0 } })), /maxTokens/);
  assert.throws(
    () => decodeControl(bytes({ type: 'reserve', request: { ...request, promptTokens: [1.5] } })),
    /prompt token/,
  );
  assert.throws(
    () => decodeControl(bytes({ type: 'end', request: 'r', end: { kind: 'failed', code: 'made_up', message: 'x' } })),
    /code is made_up/,
  );
});

test('an error keeps its code and param across the wire', () => {
  const end = endFromWire(
    endToWire({ kind: 'failed', error: new KvfenceError('rate_limit_exceeded', 'slow down', 'x') }),
  );
  assert.equal(end.kind, 'failed');
  if (end.kind === 'failed') {
    assert.equal(end.error.code, 'rate_limit_exceeded');
    assert.equal(end.error.param, 'x');
  }
});

test('sampling options and a response format travel with the request, checked field by field', () => {
  const full = {
    ...request,
    sampling: {
      ...request.sampling,
      frequencyPenalty: 0.5,
      presencePenalty: -0.25,
      repetitionPenalty: 1.1,
      logitBias: [[3, -100] as [number, number]],
      minTokens: 2,
      ignoreEos: true,
      stopTokenIds: [7, 9],
    },
    constraint: { kind: 'json_schema' as const, schema: { type: 'object', properties: { a: { type: 'integer' } } } },
    logprobs: false,
  };
  assert.deepEqual(decodeControl(encodeControl({ type: 'reserve', request: full })), {
    type: 'reserve',
    request: full,
  });
  const refused = (patch: Record<string, unknown>, field: RegExp) => {
    const bytes = new Uint8Array(Buffer.from(JSON.stringify({ type: 'reserve', request: { ...full, ...patch } })));
    assert.throws(
      () => decodeControl(bytes),
      (e: unknown) => e instanceof KvfenceError && field.test(e.message),
    );
  };
  refused({ sampling: { ...full.sampling, logitBias: [[3]] } }, /logitBias value/);
  refused({ sampling: { ...full.sampling, ignoreEos: 'yes' } }, /ignoreEos/);
  refused({ logprobs: 0 }, /logprobs/);
  refused({ sampling: { ...full.sampling, stopTokenIds: [-1] } }, /stop token id/);
  refused({ constraint: { kind: 'regex' } }, /constraint kind/);
  let deep: unknown = {};
  for (let i = 0; i < 1000; i++) deep = { a: deep };
  refused({ constraint: { kind: 'json_schema', schema: deep } }, /nested too deeply/);
});
