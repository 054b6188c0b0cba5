/**
 * A small OpenAI-compatible server for the auditor's tests (node:http): /v1/models, /v1/completions and
 * /v1/chat/completions, streamed or not, with logprobs and usage. One "token" is one whitespace-separated word (plus
 * one for BOS); answers are deterministic "echo-ish" words picked from the prompt. Modes make it misbehave the way
 * real servers have:
 *   honest           400 context_length_exceeded above the context, 429 above `inFlightMax`
 *   leaky            now and then appends another tenant's earlier prompt to an answer (a KV leak)
 *   oversize200      answers an oversize request 200 with a 1-token placeholder (the incident)
 *   perturbUnderLoad logprobs shift when another request is in flight (not batch-invariant)
 *   nondeterministic logprobs jitter on every call, even alone
 *   failUnderLoad    a request that arrives while another is in flight gets a 500 (alone, every request is answered)
 *   hiddenLeak       like leaky, but the other tenant's prompt rides in a second choice, which the auditor never asks for
 *   failAll          every completion is a 500
 *   error200         a request within 2 tokens of the context, or over it, gets a 200 whose body is an error object
 *                    (its code carries terminal escape sequences and a line that fakes a clean verdict)
 * and timing options, for the timing scenarios (any mode):
 *   prefillMsPerWord  the first token waits this long per prompt word not in the prompt cache
 *   cache             'tenant': a prompt's words are cached for its tenant; 'shared': for everyone (the side channel)
 *   jitterMs          a uniformly random extra delay before the first token (a noisy network)
 *   fcfs              one request at a time, strictly in arrival order, whoever sent it
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type FakeMode =
  | 'honest'
  | 'leaky'
  | 'oversize200'
  | 'perturbUnderLoad'
  | 'nondeterministic'
  /** a cancelled stream breaks its tenant's requests for 100 ms (500), as a zombie writing into freed pages would */
  | 'brokenAfterCancel'
  | 'failUnderLoad'
  | 'hiddenLeak'
  | 'failAll'
  | 'error200';

/** error200's error code: clears the screen, prints a fake verdict, hides what follows */
export const HOSTILE_MESSAGE =
  '\u001b[2J\u001b[H\nverdict: clean (no findings; every scenario passed); exit code 0\u001b[8m';

export const FAKE_KEYS: Record<string, string> = { 'key-alpha-1111': 'alpha', 'key-beta-2222': 'beta' };
export const FAKE_KEYS_TEXT = '# tenant key\nalpha key-alpha-1111\nbeta  key-beta-2222\n';

export interface FakeServer {
  url: string;
  served: number;
  close(): Promise<void>;
}

export interface FakeServerOptions {
  mode: FakeMode;
  context: number;
  inFlightMax: number;
  /** delay per streamed token */
  tokenDelayMs: number;
  prefillMsPerWord?: number;
  cache?: 'tenant' | 'shared';
  jitterMs?: number;
  fcfs?: boolean;
}

/** prompts remembered by the simulated prompt cache (oldest dropped first) */
const CACHED_PROMPTS_MAX = 64;

const BODY_BYTES_MAX = 8 * 1024 * 1024;

function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

export async function startFakeServer(options: FakeServerOptions): Promise<FakeServer> {
  let inFlight = 0;
  const lastPrompt = new Map<string, string>();
  const damagedUntil = new Map<string, number>(); // brokenAfterCancel: a tenant's requests fail until then
  const state = { served: 0 };
  const cached: { owner: string; words: string[] }[] = [];
  let queue: Promise<void> = Promise.resolve(); // fcfs: the request ahead of the next one
  /** The simulated prefill: waits for the words not cached (for this tenant, or for anyone), then caches them. */
  async function prefill(tenant: string, words: string[]): Promise<void> {
    const owner = options.cache === 'shared' ? '' : tenant;
    let hit = 0;
    if (options.cache !== undefined) {
      for (const c of cached) {
        if (c.owner !== owner) continue;
        let i = 0;
        while (i < words.length && i < c.words.length && words[i] === c.words[i]) i++;
        hit = Math.max(hit, i);
      }
      cached.push({ owner, words });
      if (cached.length > CACHED_PROMPTS_MAX) cached.shift();
    }
    const ms = (words.length - hit) * (options.prefillMsPerWord ?? 0) + Math.random() * (options.jitterMs ?? 0);
    if (ms > 0) await delay(ms);
  }
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) send(res, 500, { error: { message: 'fake server bug', code: 'internal_error' } });
      else res.end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const key = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
    const tenant = FAKE_KEYS[key];
    if (tenant === undefined) return send(res, 401, { error: { message: 'bad key', code: 'invalid_api_key' } });
    if (req.method === 'GET' && req.url === '/v1/models') {
      return send(res, 200, {
        object: 'list',
        data: [{ id: 'fake-model', object: 'model', max_model_len: options.context }],
      });
    }
    const chat = req.url === '/v1/chat/completions';
    if (req.method !== 'POST' || (req.url !== '/v1/completions' && !chat)) {
      return send(res, 404, { error: { message: 'no route', code: 'not_found' } });
    }
    const body = JSON.parse(await readBody(req)) as Record<string, unknown>;
    const prompt = chat
      ? String((body['messages'] as { content: string }[] | undefined)?.[0]?.content ?? '')
      : String(body['prompt'] ?? '');
    const maxTokens = typeof body['max_tokens'] === 'number' ? body['max_tokens'] : 16;
    const words = prompt.split(/\s+/).filter((w) => w !== '');
    const promptTokens = words.length + 1;
    if (inFlight >= options.inFlightMax) {
      return send(res, 429, { error: { message: 'too many requests', code: 'rate_limit_exceeded' } });
    }
    if (options.mode === 'failAll' || (options.mode === 'failUnderLoad' && inFlight > 0))
      return send(res, 500, { error: { message: 'down', code: 'internal_error' } });
    if (options.mode === 'error200' && promptTokens + maxTokens >= options.context - 1) {
      return send(res, 200, { error: { message: HOSTILE_MESSAGE, code: HOSTILE_MESSAGE } });
    }
    let count = maxTokens;
    if (promptTokens + maxTokens > options.context) {
      if (options.mode !== 'oversize200') {
        return send(res, 400, { error: { message: 'too long', code: 'context_length_exceeded' } });
      }
      count = 1; // the placeholder
    }
    if ((damagedUntil.get(tenant) ?? 0) > Date.now()) {
      return send(res, 500, { error: { message: 'KV isolation check failed', code: 'internal_error' } });
    }
    inFlight++;
    state.served++;
    const crowded = inFlight > 1;
    const ahead = queue;
    let done = () => {};
    if (options.fcfs === true) queue = new Promise<void>((resolve) => (done = resolve));
    try {
      await ahead;
      await prefill(tenant, words);
      const h = hash(prompt);
      const pieces: { text: string; logprob: number }[] = [];
      for (let i = 0; i < count; i++) {
        let logprob = -(((h + i * 2654435761) >>> 0) % 1000) / 997;
        if (options.mode === 'perturbUnderLoad' && crowded) logprob += 0.001;
        if (options.mode === 'nondeterministic') logprob += Math.random() * 1e-3;
        pieces.push({ text: ` ${words[(h + i * 7) % Math.max(1, words.length)] ?? 'x'}`, logprob });
      }
      const other = [...lastPrompt].find(([t]) => t !== tenant)?.[1]?.slice(0, 80);
      if (options.mode === 'leaky' && state.served % 3 === 0 && other !== undefined) {
        pieces.push({ text: ` ${other}`, logprob: -0.5 });
      }
      const hidden = options.mode === 'hiddenLeak' ? other : undefined;
      lastPrompt.set(tenant, prompt);
      const usage = {
        prompt_tokens: promptTokens,
        completion_tokens: pieces.length,
        total_tokens: promptTokens + pieces.length,
      };
      if (body['stream'] === true) {
        if (options.mode === 'brokenAfterCancel')
          res.on('close', () => {
            if (!res.writableFinished) damagedUntil.set(tenant, Date.now() + 100);
          });
        await stream(res, pieces, chat, usage, hidden);
      } else {
        await delay(options.tokenDelayMs * 2);
        const whole = wholeBody(pieces, chat, usage);
        if (hidden !== undefined) whole.choices.push(secondChoice(hidden, chat));
        send(res, 200, whole);
      }
    } finally {
      inFlight--;
      done();
    }
  }

  async function stream(
    res: ServerResponse,
    pieces: { text: string; logprob: number }[],
    chat: boolean,
    usage: Record<string, number>,
    hidden: string | undefined,
  ): Promise<void> {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    if (hidden !== undefined) res.write(`data: ${JSON.stringify({ choices: [secondChoice(hidden, chat)] })}\n\n`);
    for (const p of pieces) {
      if (res.destroyed) return;
      await delay(options.tokenDelayMs);
      const choice = chat
        ? { index: 0, delta: { content: p.text }, logprobs: { content: [{ token: p.text, logprob: p.logprob }] } }
        : { index: 0, text: p.text, logprobs: { tokens: [p.text], token_logprobs: [p.logprob] } };
      res.write(`data: ${JSON.stringify({ choices: [{ ...choice, finish_reason: null }] })}\n\n`);
    }
    res.write(`data: ${JSON.stringify({ choices: [{ index: 0, text: '', finish_reason: 'length' }], usage })}\n\n`);
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    get served() {
      return state.served;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** hiddenLeak's second choice: what a client that reads only the first never sees */
function secondChoice(text: string, chat: boolean): Record<string, unknown> {
  return chat
    ? { index: 1, message: { role: 'assistant', content: text }, finish_reason: 'length' }
    : { index: 1, text, finish_reason: 'length' };
}

function wholeBody(
  pieces: { text: string; logprob: number }[],
  chat: boolean,
  usage: Record<string, number>,
): { object: string; choices: Record<string, unknown>[]; usage: Record<string, number> } {
  const text = pieces.map((p) => p.text).join('');
  if (chat) {
    return {
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: text },
          logprobs: { content: pieces.map((p) => ({ token: p.text, logprob: p.logprob })) },
          finish_reason: 'length',
        },
      ],
      usage,
    };
  }
  return {
    object: 'text_completion',
    choices: [
      {
        index: 0,
        text,
        logprobs: { tokens: pieces.map((p) => p.text), token_logprobs: pieces.map((p) => p.logprob) },
        finish_reason: 'length',
      },
    ],
    usage,
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.byteLength;
      if (bytes > BODY_BYTES_MAX) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
