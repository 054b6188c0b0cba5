// Colocated and disaggregated runs of the same requests give bit-identical tokens and logprobs (DESIGN §1): greedy
// and seeded sampling, chat and completions, streamed and not, a first token that is the last (max_tokens 1), and
// different prompt lengths around page boundaries. Each disaggregated answer is checked to have gone through a
// prefill worker's pool and a decode worker's transfer (the split path really ran).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RunningCluster } from '../../src/launch/cluster-server.js';
import { type RunningServer, startServer } from '../../src/launch/colocated-server.js';
import { tokens } from '../serving/isolation-suite.js';
import { clientFor, MODEL_ID, type Served, testServeConfig } from '../serving/serve-helpers.js';
import { assertClusterPoolsWhole, poolStats, startTestCluster } from './cluster-helpers.js';

let colocated: RunningServer;
let cluster: RunningCluster;
before(async () => {
  [colocated, cluster] = await Promise.all([startServer(testServeConfig()), startTestCluster()]);
});
after(async () => {
  await Promise.all([colocated?.close(), cluster?.close()]);
});

interface Run {
  ids: string[];
  logprobs: number[];
  top: string;
  finish: string | null;
  usage: string;
}

async function completion(server: Served, body: Record<string, unknown>): Promise<Run> {
  const r = await clientFor(server).completions.create({
    model: MODEL_ID,
    prompt: '',
    logprobs: 3,
    ...body,
    stream: false,
  });
  const c = r.choices[0]!;
  return {
    ids: c.logprobs?.tokens ?? [],
    logprobs: c.logprobs?.token_logprobs ?? [],
    top: JSON.stringify(c.logprobs?.top_logprobs),
    finish: c.finish_reason,
    usage: JSON.stringify(r.usage),
  };
}

describe('colocated vs disaggregated (1 prefill + 1 decode child process)', () => {
  test('greedy completions of many prompt lengths: bit-identical tokens, logprobs, top logprobs', async () => {
    const before = await poolStats(cluster);
    let requests = 0;
    for (const [length, maxTokens] of [
      [1, 8],
      [15, 20],
      [16, 17],
      [17, 30],
      [63, 9],
      [100, 40],
      [200, 56],
    ] as const) {
      const body = { prompt: tokens(length, length), max_tokens: maxTokens, temperature: 0 };
      const [a, b] = await Promise.all([completion(colocated, body), completion(cluster, body)]);
      assert.deepEqual(b, a, `prompt of ${length} tokens`);
      assert.ok(a.logprobs.length > 0);
      requests++;
    }
    const afterStats = await poolStats(cluster);
    for (const [i, s] of afterStats.entries()) {
      assert.equal(
        s.reservations - before[i]!.reservations >= requests,
        true,
        `${cluster.workers[i]!.name} served them`,
      );
    }
    await assertClusterPoolsWhole(cluster);
  });

  test('seeded sampling: the decode side skips the draw the prefill used for the first token', async () => {
    for (const seed of [1, 42, 31337]) {
      const body = { prompt: tokens(40, seed), max_tokens: 24, temperature: 1.3, top_p: 0.95, seed };
      const [a, b] = await Promise.all([completion(colocated, body), completion(cluster, body)]);
      assert.deepEqual(b, a, `seed ${seed}`);
    }
  });

  test('max_tokens 1: the first token (from the COMMIT) is the whole answer', async () => {
    const body = { prompt: tokens(33, 9), max_tokens: 1, temperature: 0 };
    const [a, b] = await Promise.all([completion(colocated, body), completion(cluster, body)]);
    assert.equal(a.ids.length, 1);
    assert.deepEqual(b, a);
  });

  test('chat, streamed: the same chunks of text and logprobs', async () => {
    const stream = async (server: Served) => {
      const s = await clientFor(server).chat.completions.create({
        model: MODEL_ID,
        messages: [{ role: 'user', content: 'What does a decode worker do with a page?' }],
        max_tokens: 25,
        temperature: 0,
        logprobs: true,
        top_logprobs: 2,
        stream: true,
      });
      const parts: string[] = [];
      for await (const chunk of s) {
        const c = chunk.choices[0];
        if (c !== undefined) parts.push(JSON.stringify([c.delta.content, c.logprobs, c.finish_reason]));
      }
      return parts;
    };
    const [a, b] = await Promise.all([stream(colocated), stream(cluster)]);
    assert.ok(a.length > 5);
    assert.deepEqual(b, a);
    await assertClusterPoolsWhole(cluster);
  });
});
