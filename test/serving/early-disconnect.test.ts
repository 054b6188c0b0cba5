/**
 * A client that goes away while the gateway is still preparing its request (the chat template and the tokenizer
 * thread, which may be queued behind other tenants' prompts) is cancelled before the request takes a place or a page
 * (I6: counted as cancelled, never as completed; I8: nothing held). Until this was fixed the gateway listened for the
 * close only after preparing, so such a request ran to its max_tokens for nobody and counted as a success.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ENGINE_PARTS } from '../../src/engine/engine-parts.js';
import { CompletionRun } from '../../src/gateway/completion-run.js';
import type { RunningServer } from '../../src/launch/colocated-server.js';
import {
  assertPoolWhole,
  keyFor,
  MODEL_ID,
  startTestServer,
  waitFor,
  waitForAsync,
  writeKeyFile,
} from './serve-helpers.js';

/** Preparation held open until the test lets it go, as a slow tokenizer call would hold it. */
let preparing = false;
let letGo: () => void = () => {};

class HeldPreparation extends CompletionRun {
  protected override async promptAndMaxTokens(): Promise<{ prompt: number[]; maxTokens: number }> {
    const result = await super.promptAndMaxTokens();
    const held = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    preparing = true;
    await held;
    return result;
  }
}

async function outcomes(server: RunningServer, tenant: string): Promise<Record<string, number>> {
  const metric = await server.gateway.metrics.requests.get();
  const counts: Record<string, number> = {};
  for (const v of metric.values) if (v.labels['tenant'] === tenant) counts[String(v.labels['outcome'])] = v.value;
  return counts;
}

const openConnections = (server: RunningServer) =>
  new Promise<number>((resolve, reject) =>
    server.gateway.app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
  );

describe('a client gone before its request starts', { timeout: 60_000 }, () => {
  let server: RunningServer;
  before(async () => {
    server = await startTestServer(
      { apiKeysPath: writeKeyFile(['gone']), kvPages: 256 },
      { ...ENGINE_PARTS, completionRun: HeldPreparation },
    );
  });
  after(async () => {
    await server.close();
  });

  it('is cancelled at the gate: no place, no page, no token, counted as cancelled', async () => {
    const body = JSON.stringify({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'tell me a long story' }],
      max_tokens: 200,
      ignore_eos: true,
      stream: true,
    });
    const { port } = new URL(server.url);
    const client = connect(Number(port), '127.0.0.1');
    client.on('error', () => {});
    client.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n` +
        `authorization: Bearer ${keyFor('gone')}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await waitFor(() => preparing, 'the request to be in preparation');
    client.destroy();
    // the server has seen the close before the preparation ends
    let open = 1;
    await waitFor(() => {
      openConnections(server).then((n) => {
        open = n;
      });
      return open === 0;
    }, 'the server to see the client go');
    letGo();
    await waitForAsync(async () => Object.keys(await outcomes(server, 'gone')).length > 0, 'the request to end');
    assert.deepEqual(await outcomes(server, 'gone'), { cancelled: 1 });
    assert.equal(server.gateway.gate.requestsOf('gone'), 0);
    assert.equal(server.worker.stats().running, 0);
    const tokens = await server.gateway.metrics.generationTokens.get();
    assert.equal(
      tokens.values.reduce((sum, v) => sum + v.value, 0),
      0,
      'no token was generated for a client that had gone',
    );
    assertPoolWhole(server);
  });
});
