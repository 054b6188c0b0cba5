/**
 * The streaming client of `bench:serve`: one POST /v1/completions with `stream: true`, timed token by token. The
 * same bytes go to kvfence and to llama-server; what comes back is checked, not trusted: a stream counts only when
 * it ends with [DONE], finish_reason "length", usage.completion_tokens equal to the tokens asked for, and as many
 * text chunks (every token of the bench model is printable text, so each one is a chunk on both servers).
 */
import { Agent, request } from 'node:http';
import { SseReader } from '../src/audit/sse.js';

export interface CompletionBody {
  prompt: number[] | string;
  max_tokens: number;
  [extra: string]: unknown;
}

export interface StreamTiming {
  /** request written → first text chunk */
  ttftMs: number;
  /** gaps between consecutive text chunks */
  itlMs: number[];
  tokens: number;
}

/** Every limit of one stream: a stuck server fails the bench instead of hanging it. */
const STREAM_TIMEOUT_MS = 10 * 60 * 1000;
const RESPONSE_BYTES_MAX = 16 * 1024 * 1024;

/**
 * A new connection per stream, on both servers: llama-server closes a streamed response's connection, and a kept-alive
 * socket reused at that moment fails the next request ("socket hang up"); a loopback connect costs far below a token.
 */
const fresh = new Agent({ keepAlive: false, maxSockets: 256 });

interface StreamEvent {
  choices?: { text?: string; finish_reason?: string | null }[];
  usage?: { completion_tokens?: number };
  error?: unknown;
}

/**
 * The API keys of the bench's three tenants: the measured clients, the probe and the busy neighbour (kvfence serves
 * them as three tenants, so the neighbour rows measure one tenant's load on another; llama-server ignores the header).
 */
export const BENCH_KEYS = {
  clients: 'kvfence-bench-clients-key',
  probe: 'kvfence-bench-probe-key',
  busy: 'kvfence-bench-busy-key',
} as const;

/**
 * One streamed completion; rejects with the reason when the server did not generate every token asked for, or went
 * `timeoutMs` without sending anything.
 */
export function streamCompletion(
  baseUrl: string,
  body: CompletionBody,
  apiKey: string,
  timeoutMs = STREAM_TIMEOUT_MS,
): Promise<StreamTiming> {
  const payload = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const chunkTimes: number[] = [];
    let finishReason: string | undefined;
    let usageTokens: number | undefined;
    let done = false;
    const events = new SseReader(RESPONSE_BYTES_MAX);
    let errorBody = ''; // a non-200 answer's first bytes, for the message
    let received = 0;
    const fail = (why: string) => {
      req.destroy();
      reject(new Error(`${baseUrl}: ${why}`));
    };
    const onEvent = (data: string) => {
      if (data === '[DONE]') {
        done = true;
        return;
      }
      const event = JSON.parse(data) as StreamEvent;
      if (event.error !== undefined) return fail(`stream error ${JSON.stringify(event.error)}`);
      const choice = event.choices?.[0];
      if (choice?.text !== undefined && choice.text !== '') chunkTimes.push(performance.now());
      if (choice?.finish_reason) finishReason = choice.finish_reason;
      if (event.usage?.completion_tokens !== undefined) usageTokens = event.usage.completion_tokens;
    };
    const req = request(
      `${baseUrl}/v1/completions`,
      {
        method: 'POST',
        agent: fresh,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
          authorization: `Bearer ${apiKey}`,
        },
        timeout: timeoutMs,
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (text: string) => {
          received += text.length;
          if (received > RESPONSE_BYTES_MAX) return fail('response over 16 MiB');
          if (res.statusCode !== 200) {
            if (errorBody.length < 300) errorBody += text;
            return;
          }
          for (const data of events.push(text)) onEvent(data);
        });
        res.on('end', () => {
          if (res.statusCode !== 200) return fail(`HTTP ${res.statusCode}: ${errorBody.slice(0, 300)}`);
          for (const data of events.finish()) onEvent(data);
          const want = body.max_tokens;
          if (!done) return fail('the stream ended without [DONE]');
          if (finishReason !== 'length') return fail(`finish_reason ${finishReason}, expected length`);
          if (usageTokens !== want) return fail(`usage.completion_tokens ${usageTokens}, expected ${want}`);
          if (chunkTimes.length !== want) return fail(`${chunkTimes.length} text chunks, expected ${want}`);
          resolve({
            ttftMs: chunkTimes[0]! - started,
            itlMs: chunkTimes.slice(1).map((t, i) => t - chunkTimes[i]!),
            tokens: usageTokens,
          });
        });
        res.on('error', (error) => fail(error.message));
      },
    );
    req.on('timeout', () => fail(`no answer within ${timeoutMs} ms`));
    req.on('error', (error) => reject(new Error(`${baseUrl}: ${error.message} (${chunkTimes.length} tokens in)`)));
    req.end(payload);
  });
}
