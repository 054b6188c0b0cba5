/**
 * `kvfence serve`'s engine on its own thread (src/colocated/engine-thread.ts, DESIGN I11): the same answers as the
 * engine on the event loop's thread, refusals and shutdowns that reach the client with their status, a dead thread
 * that fails what it held at once, and steps that go on while the event loop is busy.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Worker } from 'node:worker_threads';
import type { EngineThread } from '../../src/colocated/engine-thread.js';
import type { GenerationEnd, GenerationRequest } from '../../src/engine/request.js';
import { type RunningServer, startServer, startThreadedServer } from '../../src/launch/colocated-server.js';
import { spyChoiceEnds, stopOnlyIn } from '../helpers/choice-ends.js';
import { MODEL_ID, post, testServeConfig, waitForAsync } from './serve-helpers.js';

type Threaded = RunningServer<EngineThread>;

const completion = (prompt: string, maxTokens: number) => ({
  model: MODEL_ID,
  prompt,
  max_tokens: maxTokens,
  temperature: 0,
});

async function waiting(server: Threaded, count: number): Promise<void> {
  await waitForAsync(async () => {
    await server.worker.refresh();
    return server.worker.stats().waiting === count;
  }, `${count} waiting request(s)`);
}

function errorCode(json: unknown): string {
  return (json as { error: { code: string } }).error.code;
}

describe('the engine on its own thread', { timeout: 120_000 }, () => {
  let threaded: Threaded;
  let inProcess: RunningServer;
  before(async () => {
    threaded = await startThreadedServer(testServeConfig());
    inProcess = await startServer(testServeConfig());
  });
  after(async () => {
    await threaded?.close();
    await inProcess?.close();
  });

  test('answers are the same as the engine on the event loop thread, streamed or not', async () => {
    for (const prompt of ['the quick brown fox', 'a b c d e f g']) {
      const a = await post(threaded, '/v1/completions', completion(prompt, 24));
      const b = await post(inProcess, '/v1/completions', completion(prompt, 24));
      assert.equal(a.status, 200);
      assert.equal(b.status, 200);
      const text = (r: typeof a) => (r.json as { choices: { text: string }[] }).choices[0]!.text;
      assert.ok(text(a).length > 0);
      assert.equal(text(a), text(b));
      assert.deepEqual((a.json as { usage: unknown }).usage, (b.json as { usage: unknown }).usage);
    }
    const streamed = await fetch(`${threaded.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...completion('the quick brown fox', 24), stream: true }),
      signal: AbortSignal.timeout(30_000),
    });
    assert.equal(streamed.status, 200);
    const body = await streamed.text();
    let text = '';
    for (const line of body.split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      text += (JSON.parse(line.slice(6)) as { choices: { text: string }[] }).choices[0]?.text ?? '';
    }
    const plain = await post(inProcess, '/v1/completions', completion('the quick brown fox', 24));
    assert.equal(text, (plain.json as { choices: { text: string }[] }).choices[0]!.text);
    assert.ok(body.trimEnd().endsWith('data: [DONE]'));
  });

  test('/health reads the thread pool through refresh', async () => {
    const health = await fetch(`${threaded.url}/health`, { signal: AbortSignal.timeout(10_000) });
    assert.equal(health.status, 200);
    const json = (await health.json()) as { kvPagesTotal: number; kvPagesFree: number; running: number };
    assert.equal(json.kvPagesTotal, 128);
    assert.equal(json.kvPagesFree, 128, 'every request so far has ended and freed its pages');
    assert.equal(json.running, 0);
  });

  test('callers refreshing at once share one question to the engine thread', async () => {
    // /health and /metrics are public: a client hammering them must not put a message between every two steps
    const asks = Array.from({ length: 50 }, () => threaded.worker.refresh());
    assert.equal(new Set(asks).size, 1, 'one round, however many callers');
    await Promise.all(asks);
    assert.notEqual(threaded.worker.refresh(), asks[0], 'the next round asks again');
  });

  test('a client that goes away mid-stream is cancelled on the thread, and its pages come back', async () => {
    const gone = new AbortController();
    const response = await fetch(`${threaded.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...completion('a long one', 200), stream: true, ignore_eos: true }),
      signal: gone.signal,
    });
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    await reader.read(); // the stream has begun: the request holds pages on the thread
    threaded.worker.pause(); // it cannot finish on its own now: only the cancel can free its pages
    await threaded.worker.refresh();
    assert.equal(threaded.worker.stats().running, 1);
    assert.ok(threaded.worker.stats().pagesFree < 128, 'the running request holds pages');
    gone.abort();
    try {
      await waitForAsync(async () => {
        await threaded.worker.refresh();
        const s = threaded.worker.stats();
        return s.running === 0 && s.waiting === 0 && s.pagesFree === 128;
      }, 'the cancelled request to free its pages on the thread');
    } finally {
      threaded.worker.resume();
    }
  });

  test('a stop sequence that ends one of n answers stops it on the thread', async () => {
    const body = { ...completion('Once upon a page', 24), n: 2, temperature: 1, seed: 11 };
    const texts = async (extra: object) =>
      ((await post(threaded, '/v1/completions', { ...body, ...extra })).json as { choices: { text: string }[] })
        .choices;
    const [t0, t1] = (await texts({})).map((c) => c.text) as [string, string];
    const spy = spyChoiceEnds(threaded.worker);
    try {
      const stopped = await texts({ stop: [stopOnlyIn(t0, t1)] });
      assert.equal(stopped[0]!.text, t0);
      assert.deepEqual(spy.ended, [1]);
      const second = spy.engineEnds[0]?.[1];
      assert.equal(second?.reason, 'stop', 'the thread stopped answer 1');
      assert.ok(second.completionTokens < 24, `${second.completionTokens} tokens generated`);
    } finally {
      spy.restore();
    }
  });

  test('model steps go on while the event loop is busy', async () => {
    const request = (id: string): GenerationRequest => ({
      id,
      tenant: 'dev',
      promptTokens: [5, 6, 7, 8],
      maxTokens: 240,
      sampling: { temperature: 0, topK: 0, topP: 1, seed: 0, ignoreEos: true },
      topLogprobs: 0,
      tenantKvPagesMax: 128,
    });
    const run = (id: string, blockMs: number) =>
      new Promise<{ end: GenerationEnd; tokens: number; afterBlockMs: number }>((resolve) => {
        let tokens = 0;
        let unblocked = 0;
        threaded.worker.submit(request(id), {
          onToken: () => tokens++,
          onEnd: (end) => resolve({ end, tokens, afterBlockMs: performance.now() - unblocked }),
        });
        const until = performance.now() + blockMs;
        while (performance.now() < until) {} // the gateway's thread busy (a long parse, a slow client's writes)
        unblocked = performance.now();
      });
    await run('warm-up', 0);
    const t0 = performance.now();
    const free = await run('unblocked', 0);
    const generateMs = performance.now() - t0;
    assert.equal(free.end.kind, 'finished');
    assert.equal(free.tokens, 240);
    // block for longer than the whole generation takes: on the thread, it is done when the block ends
    const blocked = await run('blocked', Math.max(1_000, 3 * generateMs + 500));
    assert.equal(blocked.end.kind, 'finished');
    assert.equal(blocked.tokens, 240);
    // on the event loop's thread, the whole generation would only start now (checked: ~0.6× of it remains)
    assert.ok(
      blocked.afterBlockMs < generateMs / 4,
      `the answer took ${blocked.afterBlockMs.toFixed(0)} ms after the block (generation alone: ${generateMs.toFixed(0)} ms)`,
    );
  });
});

describe('refusals, shutdown and a dead engine thread', { timeout: 120_000 }, () => {
  test('a full queue is refused with 503 from the thread; close ends what is in flight with 503', async () => {
    const server = await startThreadedServer(testServeConfig({ runningMax: 1, waitingMax: 1 }));
    try {
      server.worker.pause(); // nothing is admitted: the queue fills deterministically
      const first = post(server, '/v1/completions', completion('a', 2));
      await waiting(server, 1);
      const full = await post(server, '/v1/completions', completion('b', 2));
      assert.equal(full.status, 503);
      assert.equal(errorCode(full.json), 'server_overloaded');
      server.worker.resume();
      assert.equal((await first).status, 200);
      server.worker.pause();
      const held = post(server, '/v1/completions', completion('c', 2));
      await waiting(server, 1);
      await server.worker.close();
      const closed = await held;
      assert.equal(closed.status, 503);
      assert.match((closed.json as { error: { message: string } }).error.message, /shutting down/);
    } finally {
      await server.close();
    }
  });

  test('when the thread dies, what it held fails with 503 at once, new requests too, and the server is told', async () => {
    const downs: string[] = [];
    const server = await startThreadedServer(
      testServeConfig(),
      () => {},
      (why) => downs.push(why),
    );
    try {
      server.worker.pause();
      const held = post(server, '/v1/completions', completion('a', 2));
      await waiting(server, 1);
      await (server.worker as unknown as { thread: Worker }).thread.terminate();
      const failed = await held;
      assert.equal(failed.status, 503);
      assert.equal(errorCode(failed.json), 'worker_unavailable');
      assert.deepEqual(downs, ['exited (code 1)']);
      const next = await post(server, '/v1/completions', completion('b', 2));
      assert.equal(next.status, 503);
      assert.equal(errorCode(next.json), 'worker_unavailable');
    } finally {
      await server.close();
    }
  });

  test('a model file the thread cannot load fails the start with its own error', async () => {
    await assert.rejects(
      startThreadedServer(testServeConfig({ modelPath: '/nonexistent/model.gguf' })),
      (e: Error & { code?: string }) => e.code === 'file_not_found',
    );
  });
});
