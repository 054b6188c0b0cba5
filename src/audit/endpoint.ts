/**
 * The auditor's only way to the endpoint: plain `fetch` (no SDK, so any OpenAI-compatible server works). Every call is
 * bounded: a per-request timeout, a cap on the bytes read (the rest is cancelled), and an optional client-side abort
 * after some streamed deltas (the interruption scenario). Every call, whatever its ending, becomes one CallRecord that
 * the canary scan reads later.
 */
import { errorMessage } from '../util/errors.js';
import { collectStrings, type ParsedPiece, parseCompletionJson, parseJsonText } from './completion-parse.js';
import type { AuditTenant } from './keys-file.js';
import { SseReader } from './sse.js';

export type ApiDialect = 'completions' | 'chat';

export interface EndpointOptions {
  /** base URL up to and including /v1 (a URL without /v1 gets it appended) */
  baseUrl: string;
  model: string;
  api: ApiDialect;
  timeoutMs: number;
  responseBytesMax: number;
  seed: number;
}

export interface CallSpec {
  tenant: AuditTenant;
  scenario: string;
  /** short description, e.g. "solo 1/2 of probe 3" */
  label: string;
  prompt: string;
  maxTokens: number;
  stream: boolean;
  /** temperature 0, the audit seed, logprobs on */
  greedy: boolean;
  /** cancel the request (AbortController) once this many non-empty deltas arrived */
  abortAfterDeltas?: number;
  /** ask for logprobs even when not greedy (default: only greedy requests do) */
  logprobs?: boolean;
  /** a stream the client does not read: after the headers it reads nothing for this long, then cancels */
  unreadForMs?: number;
  /** cancels the request when it fires, like a client going away (the noisy-neighbour scenario's end of phase) */
  stop?: AbortSignal;
}

export interface CallRecord {
  /** 1, 2, … in the order calls were made */
  readonly id: number;
  readonly tenant: string;
  readonly scenario: string;
  readonly label: string;
  readonly prompt: string;
  readonly maxTokens: number;
  readonly stream: boolean;
  /** HTTP status; 0 when no response came (network error, timeout) */
  status: number;
  text: string;
  deltas: string[];
  tokens: string[];
  logprobs: number[];
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  finishReason: string | undefined;
  errorCode: string | undefined;
  errorMessage: string | undefined;
  /** the body of a non-200 response (bounded), scanned for canaries too */
  errorBody: string;
  /** every string of the JSON bodies or stream events, by path (collectStrings), scanned for canaries too */
  fields: Map<string, string>;
  abortedByClient: boolean;
  timedOut: boolean;
  truncated: boolean;
  elapsedMs: number;
  /** ms from sending the request to the first streamed event carrying text or a token (time to first token) */
  firstTokenMs: number | undefined;
}

/** A successful completion: 200, whole, no error event. */
export function completed(r: CallRecord): boolean {
  return r.status === 200 && r.errorCode === undefined && !r.abortedByClient && !r.timedOut && !r.truncated;
}

export class Endpoint {
  private nextId = 1;
  private keyTurn = 0;
  readonly records: CallRecord[] = [];
  private readonly base: string;

  constructor(readonly options: EndpointOptions) {
    const trimmed = options.baseUrl.replace(/\/+$/, '');
    this.base = /\/v\d+$/.test(trimmed) ? trimmed : `${trimmed}/v1`;
  }

  get callCount(): number {
    return this.nextId - 1;
  }

  private keyOf(tenant: AuditTenant): string {
    this.keyTurn++;
    return tenant.keys[this.keyTurn % tenant.keys.length]!;
  }

  /** GET /v1/models with a tenant's key: the parsed JSON, or an error line. */
  async models(tenant: AuditTenant): Promise<{ status: number; json: unknown; error: string | undefined }> {
    const r = await this.getJson(`${this.base}/models`, this.keyOf(tenant));
    return r;
  }

  /** Token count from a /tokenize endpoint (vLLM: /tokenize {model, prompt}; llama.cpp: /tokenize {content}). */
  async tokenize(tenant: AuditTenant, text: string): Promise<number | undefined> {
    const root = this.base.replace(/\/v\d+$/, '');
    for (const [url, body] of [
      [`${root}/tokenize`, { model: this.options.model, prompt: text }],
      [`${root}/tokenize`, { content: text, add_special: true }],
      [`${this.base}/tokenize`, { model: this.options.model, prompt: text }],
    ] as const) {
      const r = await this.postJson(url, this.keyOf(tenant), body);
      if (r.status !== 200) continue;
      const json = r.json as { count?: unknown; tokens?: unknown } | undefined;
      if (typeof json?.count === 'number') return json.count;
      if (Array.isArray(json?.tokens)) return json.tokens.length;
    }
    return undefined;
  }

  async complete(spec: CallSpec): Promise<CallRecord> {
    const record: CallRecord = {
      id: this.nextId++,
      tenant: spec.tenant.name,
      scenario: spec.scenario,
      label: spec.label,
      prompt: spec.prompt,
      maxTokens: spec.maxTokens,
      stream: spec.stream,
      status: 0,
      text: '',
      deltas: [],
      tokens: [],
      logprobs: [],
      promptTokens: undefined,
      completionTokens: undefined,
      finishReason: undefined,
      errorCode: undefined,
      errorMessage: undefined,
      errorBody: '',
      fields: new Map(),
      abortedByClient: false,
      timedOut: false,
      truncated: false,
      elapsedMs: 0,
      firstTokenMs: undefined,
    };
    this.records.push(record);
    const controller = new AbortController();
    const timer = setTimeout(() => {
      record.timedOut = true;
      controller.abort();
    }, this.options.timeoutMs);
    const onStop = () => {
      record.abortedByClient = true;
      controller.abort();
    };
    spec.stop?.addEventListener('abort', onStop);
    if (spec.stop?.aborted === true) onStop();
    const started = performance.now();
    try {
      const response = await fetch(`${this.base}/${this.options.api === 'chat' ? 'chat/completions' : 'completions'}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${this.keyOf(spec.tenant)}` },
        body: JSON.stringify(this.body(spec)),
        signal: controller.signal,
      });
      record.status = response.status;
      if (response.status !== 200) {
        record.errorBody = await this.readText(response, record);
        const json = parseJsonText(record.errorBody);
        collectStrings(json, record.fields);
        const piece = parseCompletionJson(json);
        record.errorCode = piece.errorCode ?? `http_${response.status}`;
        record.errorMessage = piece.errorMessage ?? record.errorBody.slice(0, 300);
      } else if (spec.unreadForMs !== undefined) {
        await leaveUnread(spec.unreadForMs, spec.stop);
        record.abortedByClient = true;
        controller.abort();
      } else if (spec.stream && (response.headers.get('content-type') ?? '').includes('text/event-stream')) {
        await this.readStream(response, record, spec, controller, started);
      } else {
        const text = await this.readText(response, record);
        const json = parseJsonText(text);
        if (json === undefined) {
          record.errorCode = 'malformed_body';
          record.errorBody = text;
        } else {
          collectStrings(json, record.fields);
          this.apply(record, parseCompletionJson(json), true);
        }
      }
    } catch (error) {
      if (!record.abortedByClient && !record.timedOut) {
        record.errorCode = 'network_error';
        record.errorMessage = errorMessage(error);
      }
    } finally {
      clearTimeout(timer);
      spec.stop?.removeEventListener('abort', onStop);
      record.elapsedMs = performance.now() - started;
    }
    return record;
  }

  private body(spec: CallSpec): Record<string, unknown> {
    const common: Record<string, unknown> = {
      model: this.options.model,
      max_tokens: spec.maxTokens,
      stream: spec.stream,
      seed: this.options.seed,
    };
    if (spec.greedy) common['temperature'] = 0;
    const logprobs = spec.logprobs ?? spec.greedy;
    if (this.options.api === 'chat') {
      return {
        ...common,
        messages: [{ role: 'user', content: spec.prompt }],
        ...(logprobs ? { logprobs: true, top_logprobs: 1 } : {}),
      };
    }
    return { ...common, prompt: spec.prompt, ...(logprobs ? { logprobs: 1 } : {}) };
  }

  private apply(record: CallRecord, piece: ParsedPiece, whole: boolean): void {
    if (whole) record.text = piece.text;
    else if (piece.text !== '') {
      record.text += piece.text;
      record.deltas.push(piece.text);
    }
    record.tokens.push(...piece.tokens);
    record.logprobs.push(...piece.logprobs);
    record.promptTokens = piece.promptTokens ?? record.promptTokens;
    record.completionTokens = piece.completionTokens ?? record.completionTokens;
    record.finishReason = piece.finishReason ?? record.finishReason;
    if (piece.errorCode !== undefined) {
      record.errorCode = piece.errorCode;
      record.errorMessage = piece.errorMessage;
    }
  }

  private async readStream(
    response: Response,
    record: CallRecord,
    spec: CallSpec,
    controller: AbortController,
    started: number,
  ): Promise<void> {
    const sse = new SseReader(this.options.responseBytesMax);
    const handle = (events: string[]): boolean => {
      for (const data of events) {
        if (data.trim() === '[DONE]') return true;
        const json = parseJsonText(data);
        if (json === undefined) {
          record.errorCode = 'malformed_event';
          record.errorBody += data.slice(0, 1000);
          continue;
        }
        collectStrings(json, record.fields); // even after the cut below: whatever arrived is scanned for canaries
        if (record.abortedByClient) continue;
        const piece = parseCompletionJson(json);
        if (record.firstTokenMs === undefined && (piece.text !== '' || piece.tokens.length > 0)) {
          record.firstTokenMs = performance.now() - started;
        }
        this.apply(record, piece, false);
        if (spec.abortAfterDeltas !== undefined && record.deltas.length >= spec.abortAfterDeltas) {
          record.abortedByClient = true;
          controller.abort();
        }
      }
      return record.abortedByClient;
    };
    await this.readChunks(response, record, (chunk) => handle(sse.push(chunk)));
    if (!record.abortedByClient) handle(sse.finish());
  }

  private async readText(response: Response, record: { truncated: boolean }): Promise<string> {
    let text = '';
    await this.readChunks(response, record, (chunk) => {
      text += chunk;
      return false;
    });
    return text;
  }

  /** Reads the body chunk by chunk, at most responseBytesMax bytes; `onChunk` returns true to stop early. */
  private async readChunks(
    response: Response,
    record: { truncated: boolean },
    onChunk: (text: string) => boolean,
  ): Promise<void> {
    if (response.body === null) return;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let bytes = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const room = this.options.responseBytesMax - bytes;
        bytes += value.byteLength;
        if (value.byteLength > room) {
          record.truncated = true; // what fits is still read (and scanned); the rest is cancelled
          onChunk(decoder.decode(value.subarray(0, room), { stream: true }));
          break;
        }
        if (onChunk(decoder.decode(value, { stream: true }))) break;
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  private async getJson(
    url: string,
    key: string,
  ): Promise<{ status: number; json: unknown; error: string | undefined }> {
    return this.request(url, key, undefined);
  }

  private async postJson(url: string, key: string, body: unknown) {
    return this.request(url, key, body);
  }

  private async request(
    url: string,
    key: string,
    body: unknown,
  ): Promise<{ status: number; json: unknown; error: string | undefined }> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.options.timeoutMs);
    try {
      const response = await fetch(url, {
        method: body === undefined ? 'GET' : 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: controller.signal,
      });
      const text = await this.readText(response, { truncated: false });
      return { status: response.status, json: parseJsonText(text), error: undefined };
    } catch (error) {
      return { status: 0, json: undefined, error: errorMessage(error) };
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Waits `ms` (or until `stop` fires) without reading: the server's writes pile up in its buffers. */
function leaveUnread(ms: number, stop: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (stop?.aborted === true) return resolve();
    const done = () => {
      clearTimeout(timer);
      stop?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    stop?.addEventListener('abort', done);
  });
}
