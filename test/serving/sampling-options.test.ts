// Sampling options over HTTP with the official client, each with an exact expectation (token ids found through the
// model's own tokenizer), and each alone vs among the others at once: bit-identical (I7). The formulas themselves are
// checked against a reference loop in src/engine/engine-sampling.test.ts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { loadModel } from '../../src/model/load-model.js';
import { testModelFile } from '../helpers/models.js';
import { assertPoolWhole, clientFor, MODEL_ID, SERVING_MODEL, startTestServer, writeKeyFile } from './serve-helpers.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({ apiKeysPath: writeKeyFile(['acme', 'globex']) });
});
after(async () => {
  await server?.close();
});

const { tokenizer } = loadModel(testModelFile(SERVING_MODEL));
const vocab = Array.from({ length: tokenizer.vocabSize }, (_, id) => id);
const EOG = vocab.filter((id) => tokenizer.isEndOfGeneration(id));
const bias = (ids: readonly number[], value: number) => Object.fromEntries(ids.map((id) => [String(id), value]));
/** every id whose text is these bytes (a piece may have duplicates) */
const idsOf = (bytes: readonly number[]) =>
  vocab.filter((id) => Buffer.from(tokenizer.decodeBytes([id])).equals(Buffer.from(bytes)));

interface Answer {
  text: string;
  finish: string | null;
  tokens: { token: string; logprob: number; bytes: number[]; top: number[][] }[];
}

async function chat(body: Record<string, unknown>, tenant = 'acme'): Promise<Answer> {
  const r = await clientFor(server, tenant).chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Tell me about pages.' }],
    max_tokens: 10,
    temperature: 0,
    logprobs: true,
    top_logprobs: 2,
    ...body,
    stream: false,
  });
  const c = r.choices[0]!;
  return {
    text: c.message.content ?? '',
    finish: c.finish_reason,
    tokens: (c.logprobs?.content ?? []).map((t) => ({
      token: t.token,
      logprob: t.logprob,
      bytes: t.bytes ?? [],
      top: t.top_logprobs.map((x) => x.bytes ?? []),
    })),
  };
}

describe('sampling options (exact)', () => {
  test('logit_bias: +100 forces a token greedy and sampled; -100 makes the runner-up the answer', async () => {
    const forced = 300;
    const piece = Buffer.from(tokenizer.decodeBytes([forced])).toString();
    for (const sampled of [{}, { temperature: 1, seed: 5 }]) {
      const a = await chat({ logit_bias: { [forced]: 100 }, ...sampled });
      assert.deepEqual(
        a.tokens.map((t) => t.token),
        Array(10).fill(piece),
      );
      assert.equal(a.text, piece.repeat(10));
    }
    const plain = await chat({});
    const first = plain.tokens[0]!;
    const banned = await chat({ logit_bias: bias(idsOf(first.bytes), -100) });
    assert.deepEqual(banned.tokens[0]!.bytes, first.top[1], 'the second most likely token comes first');
  });

  test('end-of-generation forced by a +100 bias: stop at once; min_tokens holds it back; ignore_eos never draws it', async () => {
    const plain = await chat({});
    assert.equal(plain.finish, 'length', 'the unbiased answer does not stop by itself');
    const stopped = await chat({ logit_bias: bias(EOG, 100) });
    assert.deepEqual([stopped.text, stopped.finish, stopped.tokens.length], ['', 'stop', 0]);
    const held = await chat({ logit_bias: bias(EOG, 100), min_tokens: 3 });
    assert.equal(held.finish, 'stop');
    assert.deepEqual(held.tokens, plain.tokens.slice(0, 3));
    const ignored = await chat({ logit_bias: bias(EOG, 100), ignore_eos: true });
    assert.equal(ignored.finish, 'length');
    assert.deepEqual(
      ignored.tokens.map((t) => [t.token, t.logprob]),
      plain.tokens.map((t) => [t.token, t.logprob]),
    );
  });

  test('stop_token_ids end the answer before the token; frequency, presence and repetition change greedy text', async () => {
    const plain = await chat({});
    const third = plain.tokens[2]!;
    const before = plain.tokens.findIndex((t) => Buffer.from(t.bytes).equals(Buffer.from(third.bytes)));
    const stopped = await chat({ stop_token_ids: idsOf(third.bytes) });
    assert.equal(stopped.finish, 'stop');
    assert.deepEqual(stopped.tokens, plain.tokens.slice(0, before));
    for (const penalty of [{ frequency_penalty: 2 }, { presence_penalty: 2 }, { repetition_penalty: 2 }]) {
      const a = await chat({ ...penalty, max_tokens: 24 });
      const b = await chat({ max_tokens: 24 });
      assert.notEqual(a.text, b.text, JSON.stringify(penalty));
      assert.deepEqual(await chat({ ...penalty, max_tokens: 24 }), a, 'deterministic');
    }
  });

  test('echo: the prompt comes first, streamed and not, for text and token-id prompts', async () => {
    const client = clientFor(server, 'acme');
    const prompt = 'Once upon a page';
    const plain = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 6, temperature: 0 });
    const echoed = await client.completions.create({
      model: MODEL_ID,
      prompt,
      max_tokens: 6,
      temperature: 0,
      echo: true,
    });
    assert.equal(echoed.choices[0]!.text, prompt + plain.choices[0]!.text);
    const stream = await client.completions.create({
      model: MODEL_ID,
      prompt,
      max_tokens: 6,
      temperature: 0,
      echo: true,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, echoed.choices[0]!.text);
    const ids = await client.completions.create({ model: MODEL_ID, prompt: [5, 6, 7], max_tokens: 2, echo: true });
    assert.ok(ids.choices[0]!.text.startsWith(tokenizer.decode([5, 6, 7])));
  });

  test('I7: each option alone and all at once from two tenants give the same bits', async () => {
    const bodies: Record<string, unknown>[] = [
      { frequency_penalty: 1.5 },
      { presence_penalty: -1, repetition_penalty: 1.4 },
      { logit_bias: { '17': 4, '300': -100 } },
      { min_tokens: 4, logit_bias: bias(EOG, 100) },
      { ignore_eos: true, top_k: 20, temperature: 1.2, seed: 3 },
      { stop_token_ids: [44, 45], temperature: 0.9, top_p: 0.8, seed: 4 },
      { temperature: 1.4, seed: 11, frequency_penalty: 0.5, max_tokens: 20 },
      { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'integer' } } } },
    ];
    const alone = [];
    for (const b of bodies) alone.push(await chat(b));
    const together = await Promise.all(bodies.map((b, i) => chat(b, i % 2 === 0 ? 'acme' : 'globex')));
    assert.deepEqual(together, alone);
    assertPoolWhole(server);
  });

  test('out-of-range options are 400s naming the parameter', async () => {
    const client = clientFor(server, 'acme');
    for (const [body, param] of [
      [{ logit_bias: { '999999': 1 } }, 'logit_bias'],
      [{ logit_bias: { '5': 101 } }, 'logit_bias'],
      [{ frequency_penalty: -2.5 }, 'frequency_penalty'],
      [{ repetition_penalty: 0 }, 'repetition_penalty'],
      [{ min_tokens: 50, max_tokens: 10 }, 'min_tokens'],
      [{ stop_token_ids: [-1] }, 'stop_token_ids'],
      [{ ignore_eos: 'yes' }, 'ignore_eos'],
      [{ top_k: 1.5 }, 'top_k'],
    ] as const) {
      await assert.rejects(
        client.chat.completions.create({
          model: MODEL_ID,
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 10,
          ...(body as object),
        }),
        (e: { status?: number; param?: string }) => e.status === 400 && e.param === param,
        JSON.stringify(body),
      );
    }
  });
});
