// `n` over HTTP with the official client, exact: choice i is the same request with n = 1 and seed + i (greedy: the
// one answer n times), streamed and not, chat and completions; alone and under load bit-identical (I7). The KV sharing
// itself is shown in src/engine/engine-choices.test.ts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import { assertSecondStopped, spyChoiceEnds, stopOnlyIn } from '../helpers/choice-ends.js';
import { assertPoolWhole, clientFor, MODEL_ID, startTestServer, writeKeyFile } from './serve-helpers.js';

let server: RunningServer;
before(async () => {
  server = await startTestServer({ apiKeysPath: writeKeyFile(['acme', 'globex']) });
});
after(async () => {
  await server?.close();
});

const messages = [{ role: 'user' as const, content: 'Tell me about pages.' }];

interface Choice {
  index: number;
  text: string;
  finish: string | null;
  logprobs: number[];
}

async function chat(body: Record<string, unknown>, tenant = 'acme'): Promise<{ choices: Choice[]; tokens: number }> {
  const r = await clientFor(server, tenant).chat.completions.create({
    model: MODEL_ID,
    messages,
    max_tokens: 12,
    logprobs: true,
    ...body,
    stream: false,
  });
  return {
    choices: r.choices.map((c) => ({
      index: c.index,
      text: c.message.content ?? '',
      finish: c.finish_reason,
      logprobs: (c.logprobs?.content ?? []).map((t) => t.logprob),
    })),
    tokens: r.usage!.completion_tokens,
  };
}

/** The same chat streamed: each index's text and finish reason, and the usage chunk. */
async function streamed(body: Record<string, unknown>): Promise<{ choices: Choice[]; tokens: number }> {
  const stream = await clientFor(server, 'acme').chat.completions.create({
    model: MODEL_ID,
    messages,
    max_tokens: 12,
    logprobs: true,
    ...body,
    stream: true,
    stream_options: { include_usage: true },
  });
  const choices: Choice[] = [];
  let tokens = -1;
  for await (const chunk of stream) {
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    for (const c of chunk.choices) {
      const into = choices[c.index] ?? { index: c.index, text: '', finish: null, logprobs: [] };
      choices[c.index] = into;
      into.text += c.delta.content ?? '';
      into.logprobs.push(...(c.logprobs?.content ?? []).map((t) => t.logprob));
      if (c.finish_reason !== null) into.finish = c.finish_reason;
    }
  }
  return { choices, tokens };
}

describe('n (exact)', () => {
  test('greedy: n answers, each the one answer; usage counts them all', async () => {
    const one = await chat({ temperature: 0 });
    const three = await chat({ temperature: 0, n: 3 });
    assert.equal(one.choices[0]!.finish, 'length');
    assert.deepEqual(
      three.choices,
      [0, 1, 2].map((index) => ({ ...one.choices[0]!, index })),
    );
    assert.equal(three.tokens, 36);
  });

  test('seeded: choice i is the request alone with seed + i; streamed the same, usage included', async () => {
    const body = { temperature: 1.2, seed: 7, n: 3 };
    const three = await chat(body);
    for (let i = 0; i < 3; i++) {
      const alone = await chat({ temperature: 1.2, seed: 7 + i });
      assert.deepEqual(three.choices[i], { ...alone.choices[0]!, index: i }, `choice ${i}`);
    }
    assert.notEqual(three.choices[0]!.text, three.choices[1]!.text, 'seeded answers differ');
    assert.deepEqual(await streamed(body), three);
    assertPoolWhole(server);
  });

  test('completions: n with echo, body and stream; a stop sequence ends each answer where it appears', async () => {
    const client = clientFor(server, 'acme');
    const prompt = 'Once upon a page';
    const base = { model: MODEL_ID, prompt, max_tokens: 8, temperature: 1, seed: 3, echo: true };
    const body = await client.completions.create({ ...base, n: 2 });
    const alone = await client.completions.create({ ...base, seed: 4 });
    assert.deepEqual(
      body.choices.map((c) => [c.index, c.text.startsWith(prompt)]),
      [
        [0, true],
        [1, true],
      ],
    );
    assert.equal(body.choices[1]!.text, alone.choices[0]!.text);
    const texts = ['', ''];
    for await (const chunk of await client.completions.create({ ...base, n: 2, stream: true }))
      for (const c of chunk.choices) texts[c.index] += c.text;
    assert.deepEqual(
      texts,
      body.choices.map((c) => c.text),
    );
    // greedy: both answers are the same text, so a stop sequence from its middle ends both there
    const greedy = await chat({ temperature: 0 });
    const cut = greedy.choices[0]!.text.slice(4, 6);
    const stopped = await chat({ temperature: 0, n: 2, stop: [cut] });
    const before = greedy.choices[0]!.text.slice(0, greedy.choices[0]!.text.indexOf(cut));
    assert.deepEqual(
      stopped.choices.map((c) => [c.text, c.finish]),
      [
        [before, 'stop'],
        [before, 'stop'],
      ],
    );
  });

  test('a stop sequence that ends one answer stops the engine generating it; the others run on', async () => {
    const base = { temperature: 1, seed: 11, max_tokens: 24, logprobs: false };
    const full = await chat({ ...base, n: 2 });
    const [t0, t1] = full.choices.map((c) => c.text) as [string, string];
    const cut = stopOnlyIn(t0, t1);
    const spy = spyChoiceEnds(server.worker);
    try {
      const stopped = await chat({ ...base, n: 2, stop: [cut] });
      assert.deepEqual(
        stopped.choices.map((c) => [c.text, c.finish]),
        [
          [t0, 'length'],
          [t1.slice(0, t1.indexOf(cut)), 'stop'],
        ],
      );
      assertSecondStopped(spy, 24);
    } finally {
      spy.restore();
    }
    assertPoolWhole(server);
  });

  test('I7: n requests alone and among other requests of two tenants give the same bits', async () => {
    const bodies: [Record<string, unknown>, string][] = [
      [{ temperature: 1.1, seed: 21, n: 4 }, 'acme'],
      [{ temperature: 0, n: 2, max_tokens: 20 }, 'globex'],
      [{ temperature: 0.8, seed: 5 }, 'acme'],
      [{ temperature: 1.3, seed: 9, n: 3, frequency_penalty: 1 }, 'globex'],
    ];
    const alone = [];
    for (const [b, tenant] of bodies) alone.push(await chat(b, tenant));
    const together = await Promise.all(bodies.map(([b, tenant]) => chat(b, tenant)));
    assert.deepEqual(together, alone);
    assertPoolWhole(server);
  });

  test('n whose answers cannot fit one request’s KV is a 400 naming n; n over the bound too', async () => {
    const client = clientFor(server, 'acme');
    for (const body of [{ n: 8, max_tokens: 200 }, { n: 65 }]) {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL_ID, messages, ...body }),
        (e: { status?: number; param?: string }) => e.status === 400 && e.param === 'n',
        JSON.stringify(body),
      );
    }
    assertPoolWhole(server);
  });
});
