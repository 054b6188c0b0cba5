// The API options in both deployments: sampling options, response formats and forced tool calls give bit-identical
// answers colocated and disaggregated (the prefill worker draws the first token with the request's sampler and
// grammar, the decode worker replays it and continues), alone and all at once; first tokens that end the answer
// (a forced end-of-generation, a finished document, max_tokens 1) end it the same way; /tokenize agrees.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Ajv } from 'ajv';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { type RunningServer, startServer } from '../../src/launch/colocated-server.js';
import { loadModel } from '../../src/model/load-model.js';
import { assertSecondStopped, spyChoiceEnds, stopOnlyIn } from '../helpers/choice-ends.js';
import { testModelFile } from '../helpers/models.js';
import { clientFor, MODEL_ID, post, SERVING_MODEL, type Served, testServeConfig } from '../serving/serve-helpers.js';
import { SCHEMAS } from '../structured/schemas.js';
import { assertClusterPoolsWhole, poolStats, startTestCluster } from './cluster-helpers.js';

let colocated: RunningServer;
let cluster: RunningCluster;
before(async () => {
  [colocated, cluster] = await Promise.all([startServer(testServeConfig()), startTestCluster()]);
});
after(async () => {
  await Promise.all([colocated?.close(), cluster?.close()]);
});

const { tokenizer } = loadModel(testModelFile(SERVING_MODEL));
const EOG = Array.from({ length: tokenizer.vocabSize }, (_, id) => id).filter((id) => tokenizer.isEndOfGeneration(id));
const eogBias = Object.fromEntries(EOG.map((id) => [String(id), 100]));

async function chat(server: Served, body: Record<string, unknown>): Promise<string> {
  const r = await clientFor(server).chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Where do pages go?' }],
    max_tokens: 40,
    temperature: 0,
    logprobs: true,
    top_logprobs: 2,
    ...body,
    stream: false,
  });
  const { id: _id, created: _created, ...rest } = r;
  return JSON.stringify(
    rest.choices.map((c) => ({
      ...c,
      message: { ...c.message, tool_calls: c.message.tool_calls?.map((t) => ({ ...t, id: '' })) },
    })),
  );
}

const format = (i: number) => ({
  response_format: { type: 'json_schema', json_schema: { name: SCHEMAS[i]!.name, schema: SCHEMAS[i]!.schema } },
});

const BODIES: Record<string, unknown>[] = [
  { frequency_penalty: 1.5, presence_penalty: 0.5 },
  { repetition_penalty: 1.6, temperature: 1, seed: 3 },
  { logit_bias: { '17': 5, '300': -100 }, top_k: 30, temperature: 1.2, seed: 4 },
  { min_tokens: 5, logit_bias: eogBias },
  { ignore_eos: true, logit_bias: eogBias, max_tokens: 12 },
  { stop_token_ids: [44, 45, 46, 47, 48, 49], temperature: 1.1, seed: 5 },
  { logit_bias: eogBias }, // the prefill draws end-of-generation: the decode worker ends the answer, 0 tokens
  { ...format(0), max_tokens: 1 }, // the first token is the whole (cut) answer
  ...[0, 3, 7, 11, 12, 18, 23, 29].flatMap((i) => [format(i), { ...format(i), temperature: 1, seed: 100 + i }]),
  {
    tools: [{ type: 'function', function: { name: 'f', parameters: SCHEMAS[5]!.schema } }],
    tool_choice: { type: 'function', function: { name: 'f' } },
  },
  {
    tools: [
      { type: 'function', function: { name: 'f', parameters: SCHEMAS[1]!.schema } },
      { type: 'function', function: { name: 'g', parameters: SCHEMAS[3]!.schema } },
    ],
    tool_choice: 'required',
    temperature: 1,
    seed: 9,
  },
  // n > 1: one transfer, a first token per choice in its COMMIT, the choices forked on the decode worker
  { n: 3, temperature: 1.1, seed: 12 },
  { n: 2, max_tokens: 9 },
  { n: 3, logit_bias: eogBias }, // every choice ends at its first token: the request ends as the decode worker adopts it
  { n: 2, max_tokens: 1, temperature: 1, seed: 2 },
  { n: 2, min_tokens: 3, logit_bias: eogBias, temperature: 1, seed: 6 },
  { n: 2, ...format(3), temperature: 1, seed: 31 },
];

describe('API options, colocated vs disaggregated', () => {
  test('every option: bit-identical answers, alone and all at once; structured answers validate', async () => {
    const before = await poolStats(cluster);
    const alone: string[] = [];
    for (const body of BODIES) {
      const [a, b] = await Promise.all([chat(colocated, body), chat(cluster, body)]);
      assert.equal(b, a, JSON.stringify(body));
      alone.push(a);
    }
    const together = await Promise.all(BODIES.map((body) => chat(cluster, body)));
    assert.deepEqual(together, alone);
    const ajv = new Ajv({ strict: false });
    for (const [k, body] of BODIES.entries()) {
      const rf = body['response_format'] as { json_schema: { schema: object } } | undefined;
      const choice = JSON.parse(alone[k]!)[0] as { finish_reason: string; message: { content: string } };
      if (rf === undefined || choice.finish_reason !== 'stop') continue;
      assert.ok(ajv.validate(rf.json_schema.schema, JSON.parse(choice.message.content)), choice.message.content);
    }
    const edge = BODIES.slice(6, 8).map((_, i) => JSON.parse(alone[6 + i]!)[0]);
    assert.deepEqual([edge[0].finish_reason, edge[0].message.content], ['stop', '']);
    assert.equal(edge[1].finish_reason, 'length');
    const after = await poolStats(cluster);
    for (const [i, s] of after.entries()) assert.ok(s.reservations - before[i]!.reservations >= BODIES.length * 2);
    await assertClusterPoolsWhole(cluster);
  });

  test('a stop sequence that ends one of n answers: the same answers, and the decode worker stops generating it', async () => {
    const base = { n: 2, temperature: 1, seed: 11, max_tokens: 24, logprobs: false, top_logprobs: undefined };
    const full = JSON.parse(await chat(cluster, base)) as { message: { content: string } }[];
    const cut = stopOnlyIn(full[0]!.message.content, full[1]!.message.content);
    const spy = spyChoiceEnds(cluster.dispatcher);
    try {
      const [a, b] = await Promise.all([
        chat(colocated, { ...base, stop: [cut] }),
        chat(cluster, { ...base, stop: [cut] }),
      ]);
      assert.equal(b, a);
      assert.deepEqual(
        (JSON.parse(b) as { finish_reason: string }[]).map((c) => c.finish_reason),
        ['length', 'stop'],
      );
      assertSecondStopped(spy, 24);
    } finally {
      spy.restore();
    }
    await assertClusterPoolsWhole(cluster);
  });

  test('streamed structured output, one answer and n: the same chunks', async () => {
    for (const n of [1, 3]) {
      const stream = async (server: Served) => {
        const s = await clientFor(server).chat.completions.create({
          model: MODEL_ID,
          messages: [{ role: 'user', content: 'JSON please' }],
          max_tokens: n === 1 ? 80 : 40, // the n answers fit one request’s pages
          temperature: 1,
          seed: 12,
          n,
          ...(format(25) as object),
          stream: true,
        });
        const parts: string[] = [];
        for await (const chunk of s) parts.push(JSON.stringify(chunk.choices));
        return parts;
      };
      const [a, b] = await Promise.all([stream(colocated), stream(cluster)]);
      assert.deepEqual(b, a);
      assert.ok(a.length > 3 * n);
      assert.deepEqual(
        new Set(a.map((p) => (JSON.parse(p) as { index: number }[])[0]?.index)),
        new Set([0, 1, 2].slice(0, n)),
      );
    }
    await assertClusterPoolsWhole(cluster);
  });

  test('a bad schema or option is the same 400 from the disaggregated gateway', async () => {
    const body = {
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'email' } } },
    };
    const [a, b] = await Promise.all([
      post(colocated, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], ...body }),
      post(cluster, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], ...body }),
    ]);
    assert.equal(a.status, 400);
    assert.deepEqual(b.json, a.json);
    const [t1, t2] = await Promise.all([
      post(colocated, '/tokenize', { prompt: 'hello pages' }),
      post(cluster, '/tokenize', { prompt: 'hello pages' }),
    ]);
    assert.deepEqual(t2.json, t1.json);
  });
});
