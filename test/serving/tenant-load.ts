/**
 * Load from tenants over HTTP, for the tenant-limit tests (test/disagg/tenant-limits.test.ts): timed streams, clients
 * that keep a tenant's requests coming, and a probe tenant's latency measured under that load.
 */
import { keyFor, MODEL_ID, type Served } from './serve-helpers.js';

export interface TimedStream {
  status: number;
  /** ms since `t0` of the first streamed token and of the stream's end (undefined: no token, or refused) */
  firstTokenAt: number | undefined;
  endAt: number;
  /** completion tokens, as the stream's usage reports them */
  tokens: number;
}

/** A streamed completion of token ids; the time of its first token and end are read on the client, from `t0`. */
export async function timedStream(
  server: Served,
  tenant: string,
  prompt: readonly number[],
  maxTokens: number,
  t0: number,
  onFirstToken?: () => void,
): Promise<TimedStream> {
  const response = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${keyFor(tenant)}` },
    body: JSON.stringify({
      model: MODEL_ID,
      prompt,
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    }),
    signal: AbortSignal.timeout(60_000),
  });
  let firstTokenAt: number | undefined;
  let tokens = 0;
  if (response.body === null) throw new Error('no body');
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of response.body) {
    buffered += decoder.decode(chunk, { stream: true });
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('data: {')) continue;
      const event = JSON.parse(line.slice(6)) as {
        choices?: { text?: string }[];
        usage?: { completion_tokens: number };
      };
      if (event.usage != null) tokens = event.usage.completion_tokens;
      if (event.choices?.[0]?.text && firstTokenAt === undefined) {
        firstTokenAt = performance.now() - t0;
        onFirstToken?.();
      }
    }
  }
  return { status: response.status, firstTokenAt, endAt: performance.now() - t0, tokens };
}

export interface LoadReport {
  /** requests answered 200, refused 429, and anything else (status → count) */
  statuses: Map<number, number>;
}

/**
 * `clients` loops of one tenant's requests until `stop()`: each sends a request, awaits its answer, sends the next.
 * A refused request (429) is sent again after `retryMs` — a flooder hammering its limit.
 */
export function tenantLoad(
  server: Served,
  tenant: string,
  clients: number,
  prompt: readonly number[],
  maxTokens: number,
  retryMs: number,
): { stop(): Promise<LoadReport> } {
  const statuses = new Map<number, number>();
  let stopped = false;
  const loops = Array.from({ length: clients }, async () => {
    while (!stopped) {
      const r = await timedStream(server, tenant, prompt, maxTokens, 0);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status !== 200) await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return { statuses };
    },
  };
}

/** Median of `count` sequential probe requests' end-to-end latencies (ms); each must succeed with every token. */
export async function probeLatency(
  server: Served,
  tenant: string,
  prompt: readonly number[],
  maxTokens: number,
  count: number,
): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const r = await timedStream(server, tenant, prompt, maxTokens, t0);
    if (r.status !== 200 || r.tokens !== maxTokens)
      throw new Error(`probe ${i}: status ${r.status}, ${r.tokens} of ${maxTokens} tokens`);
    times.push(r.endAt);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}
