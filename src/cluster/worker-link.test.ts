// A worker the gateway cannot reach is asked again after a backoff, and why is said once, not at every try: an address
// that refused (a wrong cluster secret, a worker that does not fit) was retried 4 times a second forever, each a full
// handshake and an error line, and the reason of a failed connect was never said at all.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TransferTransport } from '../wire/transport.js';
import { WorkerLink } from './worker-link.js';

test('an unreachable worker is retried with a doubling pause, at most 8 times the first, and the reason said once', async () => {
  const tries: number[] = [];
  const started = performance.now();
  const transport = {
    connect: () => {
      tries.push(performance.now() - started);
      return Promise.reject(new Error('the responder’s proof does not check out (another cluster secret?)'));
    },
  } as unknown as TransferTransport;
  const warnings: string[] = [];
  const link = new WorkerLink({
    address: '127.0.0.1:9',
    transport,
    idleTimeoutMs: 1_000,
    reconnectDelayMs: 20,
    statsTimeoutMs: 1_000,
    silenceMs: 1_000,
    accept: () => undefined,
    onMessage: () => {},
    onDown: () => {},
    onDraining: () => {},
    log: { info: () => {}, error: () => {}, warn: (fields: object) => warnings.push((fields as { why: string }).why) },
  });
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  link.close();
  // tries at 0, 20, 60, 140, 300, then every 160 ms: about 10 in a second, where a fixed 20 ms pause made ~50
  assert.ok(tries.length >= 6 && tries.length <= 12, `${tries.length} tries: ${tries.map((t) => t.toFixed(0))}`);
  const gaps = tries.slice(1).map((t, i) => t - tries[i]!);
  assert.ok(
    gaps.slice(4).every((g) => g >= 150),
    `the pause grows to 8 × 20 ms: ${gaps.map((g) => g.toFixed(0))}`,
  );
  assert.deepEqual(warnings, ['connect: the responder’s proof does not check out (another cluster secret?)']);
});
