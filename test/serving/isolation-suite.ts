/**
 * The noninterference suite (I7, I2, I8) as a function of how the server under test starts, so the same test body runs
 * against the colocated server (isolation.test.ts) and the disaggregated cluster (test/disagg/isolation.test.ts).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { clientFor, MODEL_ID, post, type Served, waitForAsync, writeKeyFile } from './serve-helpers.js';

export const TENANTS = ['t0', 't1', 't2', 't3', 't4', 't5', 't6', 't7'];

/** A prompt of exactly `length` token ids (no tokenizer involved), different per seed. */
export function tokens(length: number, seed: number): number[] {
  return Array.from({ length }, (_, i) => 3 + ((i * 31 + seed * 17) % 480));
}

export interface Answer {
  text: string;
  logprobs: number[];
  finish: string;
}

export async function complete(server: Served, tenant: string, prompt: number[], maxTokens: number): Promise<Answer> {
  const r = await clientFor(server, tenant).completions.create({
    model: MODEL_ID,
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    logprobs: 1,
  });
  const c = r.choices[0]!;
  return { text: c.text, logprobs: c.logprobs?.token_logprobs ?? [], finish: c.finish_reason };
}

/** What the suite needs of a server beyond its URL: its pools, read however that server exposes them. */
export interface IsolationTarget extends Served {
  /** KV pages of every pool together (the `kvfence_kv_pages_free` metric when all are free) */
  pagesTotal: number;
  /** successful page reservations of every pool together */
  reservationCount(): Promise<number>;
  /** nothing running or waiting anywhere */
  idle(): Promise<boolean>;
  /** every pool has every page free (after async frees settle, bounded) */
  assertPoolsWhole(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The server is started with a key file for TENANTS and: 160 KV pages (per pool), 16 running, prefill chunks of 24,
 * a step budget of 96 tokens, a context of 256.
 */
export function noninterferenceSuite(label: string, start: (keyFile: string) => Promise<IsolationTarget>): void {
  describe(`noninterference and pool accounting (${label})`, () => {
    let server: IsolationTarget;
    before(async () => {
      server = await start(writeKeyFile(TENANTS));
    });
    after(async () => {
      await server?.close();
    });

    test('8 tenants at once get bit-identical tokens and logprobs to the same requests alone (I7)', async () => {
      const shapes = TENANTS.map((tenant, i) => ({
        tenant,
        prompt: tokens(3 + ((i * 37) % 150), i),
        maxTokens: 5 + ((i * 13) % 40),
      }));
      const alone: Answer[] = [];
      for (const s of shapes) alone.push(await complete(server, s.tenant, s.prompt, s.maxTokens));
      // twice over, all at once: every request shares its steps with others in another mix
      const together = await Promise.all(
        [...shapes, ...shapes].map((s) => complete(server, s.tenant, s.prompt, s.maxTokens)),
      );
      for (const [i, answer] of together.entries()) {
        assert.deepEqual(answer, alone[i % shapes.length], `request ${i} (${shapes[i % shapes.length]!.tenant})`);
      }
      assert.ok(
        alone.some((a) => a.logprobs.length > 10),
        'the mix includes long answers',
      );
      await server.assertPoolsWhole();
    });

    test('oversized prompts get 400 context_length_exceeded and touch no page (I2)', async () => {
      const before = await server.reservationCount();
      for (const [prompt, maxTokens] of [
        [tokens(257, 1), 1],
        [tokens(200, 2), 57],
        [tokens(256, 3), 1],
      ] as const) {
        const r = await post(server, '/v1/completions', { model: MODEL_ID, prompt, max_tokens: maxTokens }, 't0');
        assert.equal(r.status, 400);
        assert.equal((r.json as { error: { code: string } }).error.code, 'context_length_exceeded');
      }
      const chat = await post(
        server,
        '/v1/chat/completions',
        { model: MODEL_ID, messages: [{ role: 'user', content: 'page '.repeat(400) }] },
        't1',
      );
      assert.equal(chat.status, 400);
      assert.equal((chat.json as { error: { code: string } }).error.code, 'context_length_exceeded');
      assert.equal(await server.reservationCount(), before, 'no reservation was made');
      await server.assertPoolsWhole();
      // the largest request that fits is served
      assert.equal((await complete(server, 't0', tokens(250, 4), 6)).logprobs.length > 0, true);
    });

    test('after a load with cancellations mid-stream every page is free again (I8)', async () => {
      const runs = Array.from({ length: 16 }, async (_, i) => {
        const controller = new AbortController();
        const stream = await clientFor(server, TENANTS[i % 8]!).completions.create(
          { model: MODEL_ID, prompt: tokens(10 + i * 7, i), max_tokens: 120, temperature: 0, stream: true },
          { signal: controller.signal },
        );
        let chunks = 0;
        try {
          for await (const _chunk of stream) {
            if (i % 2 === 0 && ++chunks === 1 + (i % 5)) {
              // half of them leave mid-stream; no read after the abort (undici may leave a read after abort pending
              // forever when chunks of several tokens arrive in one network read)
              controller.abort();
              break;
            }
          }
        } catch (error) {
          if (!controller.signal.aborted) throw error;
        }
        return controller.signal.aborted;
      });
      const aborted = await Promise.all(runs);
      assert.equal(aborted.filter(Boolean).length, 8);
      await waitForAsync(() => server.idle(), 'the cancelled requests to leave the engine', 10_000);
      await server.assertPoolsWhole();
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      assert.match(metrics, new RegExp(`kvfence_kv_pages_free\\{model_name="tiny-test"\\} ${server.pagesTotal}\\n`));
    });
  });
}
