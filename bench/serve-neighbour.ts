/**
 * The noisy-neighbour part of `bench:serve`: one probe client's streams (time to first token, gaps between tokens)
 * alone, then while a busy client does one of:
 * - `slow-uploads`: 8 connections each trickling a 1 MiB request body, 4 KiB every 100 ms (pure I/O: it should cost
 *   the probe nothing);
 * - `long-prompts`: back-to-back requests with a long text prompt (tokenized by the server, then prefilled) and one
 *   output token: real work that shares the cores, so some cost is expected; a server that prefills in chunks keeps
 *   it to a chunk's time per step instead of the whole prompt's.
 */
import { request } from 'node:http';
import { errorMessage } from '../src/util/errors.js';
import { SeededRandom } from '../src/util/random.js';
import { BENCH_KEYS, type CompletionBody, type StreamTiming, streamCompletion } from './serve-client.js';

export const NEIGHBOUR_MODES = ['alone', 'slow-uploads', 'long-prompts'] as const;
export type NeighbourMode = (typeof NEIGHBOUR_MODES)[number];

const UPLOADS = 8;
const UPLOAD_BYTES = 1024 * 1024;
const UPLOAD_PIECE = 4096;
const UPLOAD_EVERY_MS = 100;
/**
 * How long a probe (or a busy client's long prompt) may go without a byte; alone a probe takes about a second. Beside
 * the slow uploads llama-server has been seen not to answer a probe at all.
 */
const PROBE_TIMEOUT_MS = 60_000;
/** characters of a long prompt: over the 2048 at which kvfence tokenizes on a worker thread */
export const LONG_PROMPT_CHARS = 3000;

/** Starts the busy client; the returned function stops it and resolves once it holds nothing. */
function startBusy(
  mode: NeighbourMode,
  baseUrl: string,
  body: (prompt: string) => CompletionBody,
): () => Promise<void> {
  if (mode === 'alone') return async () => {};
  if (mode === 'slow-uploads') {
    const uploads = Array.from({ length: UPLOADS }, () => {
      const req = request(`${baseUrl}/v1/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': UPLOAD_BYTES,
          authorization: `Bearer ${BENCH_KEYS.busy}`,
        },
      });
      req.on('error', () => {}); // a server that gives up on a slow upload closes it: expected here
      let sent = 0;
      const timer = setInterval(() => {
        if (sent + UPLOAD_PIECE >= UPLOAD_BYTES) return; // never complete it: the upload stays busy to the end
        req.write(sent === 0 ? `{"prompt":"${'a'.repeat(UPLOAD_PIECE - 11)}` : 'a'.repeat(UPLOAD_PIECE));
        sent += UPLOAD_PIECE;
      }, UPLOAD_EVERY_MS);
      return { req, timer };
    });
    return async () => {
      for (const u of uploads) {
        clearInterval(u.timer);
        u.req.destroy();
      }
    };
  }
  let running = true;
  const random = new SeededRandom(7);
  const loop = (async () => {
    while (running) {
      let text = '';
      while (text.length < LONG_PROMPT_CHARS) {
        text += ` ${Array.from({ length: 3 + random.nextInt(6) }, () => String.fromCharCode(97 + random.nextInt(26))).join('')}`;
      }
      await streamCompletion(baseUrl, { ...body(text), max_tokens: 1 }, BENCH_KEYS.busy, PROBE_TIMEOUT_MS);
    }
  })();
  loop.catch(() => {}); // handled here so it cannot crash the process early; stopping awaits it and rethrows
  return async () => {
    running = false;
    await loop;
  };
}

export interface NeighbourResult {
  mode: NeighbourMode;
  ttftMs: number[];
  itlMs: number[];
  /** why a probe stream failed (the mode's other probes are not run); undefined when every probe completed */
  failure?: string;
}

/** The probe's `probes` streams, one after another, beside the busy client of `mode`; the first failure ends them. */
export async function probeBeside(
  mode: NeighbourMode,
  baseUrl: string,
  probes: readonly CompletionBody[],
  longBody: (prompt: string) => CompletionBody,
): Promise<NeighbourResult> {
  const stop = startBusy(mode, baseUrl, longBody);
  const timings: StreamTiming[] = [];
  let failure: string | undefined;
  try {
    await new Promise((r) => setTimeout(r, 500)); // let the busy client get going first
    for (const probe of probes)
      timings.push(await streamCompletion(baseUrl, probe, BENCH_KEYS.probe, PROBE_TIMEOUT_MS));
  } catch (error) {
    failure = errorMessage(error);
  }
  try {
    await stop();
  } catch (error) {
    // the busy client's own stream failed: recorded beside the probe's failure, never in place of it
    failure =
      failure === undefined ? `busy client: ${errorMessage(error)}` : `${failure}; busy client: ${errorMessage(error)}`;
  }
  const result = { mode, ttftMs: timings.map((t) => t.ttftMs), itlMs: timings.flatMap((t) => t.itlMs) };
  return failure === undefined ? result : { ...result, failure };
}
