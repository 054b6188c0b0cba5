/**
 * One /v1/chat/completions or /v1/completions request from validation to its one ending (I6):
 *   1. model check (404), tokenize, I2 check (400 context_length_exceeded) — before anything is reserved;
 *   2. submit to the worker (429 tenant limit, 503 queue full are thrown here, nothing reserved);
 *   3. read events: tokens → text (stop sequences) → SSE chunks or an accumulated body;
 *   4. end: finished → 200 (or [DONE]); failed → its status (before the first streamed byte) or an SSE error event;
 *      client gone → cancel (pages free before the next step); deadline → cancel + 504-style error; a client that
 *      stops reading its stream → the stream is cut (stream-writer.ts) and the request cancelled like a disconnect.
 * Streams send their headers only with the first token, so a request that fails while waiting still gets its status.
 * A stream keeps no per-token state (only counts): what it holds is bounded by its writer, not by its length.
 */
import { randomInt, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyReply } from 'fastify';
import { contextError } from '../engine/admission.js';
import type { InferenceWorker } from '../engine/inference-worker.js';
import type { FinishReason, GeneratedToken, GenerationEnd, GenerationRequest } from '../engine/request.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { type ChatDelta, ChatOutput } from './chat-output.js';
import { httpErrorOf } from './errors.js';
import type { GatewayMetrics, RequestOutcome } from './metrics.js';
import * as format from './openai-format.js';
import { RequestEvents } from './request-events.js';
import type { ParsedRequest } from './schemas.js';
import { promptTokens, type ServedModel } from './served-model.js';
import { type StreamBounds, type StreamCut, StreamWriter } from './stream-writer.js';
import type { TenantGate } from './tenant-gate.js';
import type { TenantDirectory } from './tenants.js';
import { TextStream } from './text-stream.js';

export interface GatewayContext {
  model: ServedModel;
  worker: InferenceWorker;
  metrics: GatewayMetrics;
  tenants: TenantDirectory;
  /** per-tenant concurrency and page quotas, cluster-wide */
  gate: TenantGate;
  /** the advertised context: the workers' proof, within every tenant's quota (I1) */
  context: number;
  /** tokens per KV page on the workers */
  pageSize: number;
  /** the longest a request waits at its tenant's page quota (then 503) */
  queueTimeoutMs: number;
  /** the longest a request may take in all (waiting + generating) */
  requestTimeoutMs: number;
  retryAfterS: number;
}

/** How the gateway makes a CompletionRun (the mutation self-test hands in a subclass: test/mutants/). */
export type CompletionRunClass = new (
  ctx: GatewayContext,
  parsed: ParsedRequest,
  tenant: string,
  reply: FastifyReply,
  log: FastifyBaseLogger,
) => CompletionRun;

export class CompletionRun {
  private readonly id: string;
  private readonly head: format.ResponseHead;
  private readonly arrivedMs = performance.now();
  private readonly text: TextStream;
  /** chat: the answer as content and tool calls */
  private readonly chat: ChatOutput | undefined;
  /** completions with echo: the prompt's text, first in the output */
  private echoText = '';
  /** the tokens and text of a body answer (a stream sends each as it comes and keeps only counts) */
  private readonly tokens: GeneratedToken[] = [];
  private content = '';
  private completionTokens = 0;
  private contentChars = 0;
  private promptTokenCount = 0;
  private lastTokenMs: number | undefined;
  /** set once the stream's headers are out */
  private writer: StreamWriter | undefined;
  private events: RequestEvents | undefined;
  private settled = false;

  constructor(
    protected readonly ctx: GatewayContext,
    private readonly parsed: ParsedRequest,
    private readonly tenant: string,
    private readonly reply: FastifyReply,
    private readonly log: FastifyBaseLogger,
  ) {
    this.id = `${parsed.endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
    this.head = { id: this.id, created: Math.floor(Date.now() / 1000), model: ctx.model.id };
    this.text = new TextStream(ctx.model.tokenizer, parsed.stop);
    const tools = parsed.tools;
    this.chat =
      parsed.endpoint === 'chat'
        ? new ChatOutput(tools?.choice, ctx.model.toolCallFormat, new Set(tools?.tools.map((t) => t.name)))
        : undefined;
  }

  /** Validates and submits (throwing a KvfenceError → the error handler), then serves the request to its end. */
  async run(): Promise<void> {
    const request = await this.prepare();
    const gone = new AbortController();
    this.reply.raw.on('close', () => gone.abort());
    const { ctx } = this;
    const pages = Math.ceil((request.promptTokens.length + request.maxTokens) / ctx.pageSize);
    const lease = await ctx.gate.enter(this.tenant, pages, ctx.queueTimeoutMs, gone.signal);
    const events = new RequestEvents(ctx.requestTimeoutMs);
    this.events = events;
    try {
      ctx.worker.submit(request, events);
      this.log.info(
        {
          tenant: this.tenant,
          request: this.id,
          promptTokens: request.promptTokens.length,
          maxTokens: request.maxTokens,
          stream: this.parsed.stream,
        },
        'request accepted',
      );
      const disconnected = () => {
        if (!this.settled) events.push({ kind: 'disconnected' });
      };
      if (gone.signal.aborted) disconnected();
      else gone.signal.addEventListener('abort', disconnected, { once: true });
      await this.serve(events);
    } finally {
      events.dispose();
      lease.release();
    }
  }

  /** How much a stream may hold for a client that does not read (test/serving/backpressure.test.ts makes them small). */
  protected streamBounds(): StreamBounds {
    return { bufferedBytesMax: LIMITS.streamBufferedBytesMax, drainTimeoutMs: LIMITS.streamDrainTimeoutMs };
  }

  /** The prompt's token ids and the completion's length (default: the rest of the context). */
  protected async promptAndMaxTokens(): Promise<{ prompt: number[]; maxTokens: number }> {
    const tools = this.parsed.tools?.tools.map((t) => t.definition);
    const prompt = await promptTokens(this.ctx.model, this.parsed.prompt, this.ctx.context, tools);
    return { prompt, maxTokens: this.parsed.maxTokens ?? this.ctx.context - prompt.length };
  }

  private async prepare(): Promise<GenerationRequest> {
    const { parsed, ctx } = this;
    if (parsed.model !== ctx.model.id)
      throw new KvfenceError('model_not_found', `The model '${parsed.model}' does not exist`, 'model');
    const { prompt, maxTokens } = await this.promptAndMaxTokens();
    // I2: what can never fit is rejected here, before any reservation.
    const tooLong = contextError(
      prompt.length,
      maxTokens,
      ctx.context,
      parsed.endpoint === 'chat' ? 'messages' : 'prompt',
    );
    if (tooLong !== undefined) throw tooLong;
    this.promptTokenCount = prompt.length;
    if (parsed.echo)
      this.echoText = parsed.prompt.kind === 'text' ? parsed.prompt.text : ctx.model.tokenizer.decode(prompt);
    if (parsed.sampling.minTokens > maxTokens)
      throw new KvfenceError('invalid_request_error', 'min_tokens must not exceed max_tokens', 'min_tokens');
    const greedy = parsed.temperature === 0;
    const o = parsed.sampling;
    return {
      id: this.id,
      tenant: this.tenant,
      promptTokens: prompt,
      maxTokens,
      sampling: {
        ...(greedy
          ? { temperature: 0, topK: 0, topP: 1, seed: 0 }
          : {
              temperature: parsed.temperature,
              topK: o.topK,
              topP: parsed.topP,
              seed: parsed.seed ?? randomInt(2 ** 32),
            }),
        ...(o.frequencyPenalty !== 0 ? { frequencyPenalty: o.frequencyPenalty } : {}),
        ...(o.presencePenalty !== 0 ? { presencePenalty: o.presencePenalty } : {}),
        ...(o.repetitionPenalty !== 1 ? { repetitionPenalty: o.repetitionPenalty } : {}),
        ...(o.logitBias.length > 0 ? { logitBias: o.logitBias } : {}),
        ...(o.minTokens > 0 ? { minTokens: o.minTokens } : {}),
        ...(o.ignoreEos ? { ignoreEos: true } : {}),
        ...(o.stopTokenIds.length > 0 ? { stopTokenIds: o.stopTokenIds } : {}),
      },
      topLogprobs: parsed.logprobs ? parsed.topLogprobs : 0,
      tenantKvPagesMax: ctx.tenants.limitsOf(this.tenant).kvPagesMax,
      ...(parsed.constraint !== undefined ? { constraint: parsed.constraint } : {}),
    };
  }

  private async serve(events: RequestEvents): Promise<void> {
    for (;;) {
      const event = await events.next();
      switch (event.kind) {
        case 'token':
          if (this.onToken(event.token, event.atMs)) {
            this.ctx.worker.cancel(this.id); // a stop sequence ended it here
            return this.succeed('stop');
          }
          break;
        case 'end':
          return this.onEnd(event.end);
        case 'disconnected':
          this.ctx.worker.cancel(this.id);
          this.settled = true;
          this.log.info(
            { tenant: this.tenant, request: this.id, completionTokens: this.completionTokens },
            'client disconnected; request cancelled',
          );
          this.count('cancelled');
          return;
        case 'stalled':
          // the writer has closed the connection already; the rest is a disconnect's ending
          this.ctx.worker.cancel(this.id);
          this.settled = true;
          this.log.info(
            { tenant: this.tenant, request: this.id, completionTokens: this.completionTokens, ...event.cut },
            'client stopped reading its stream; request cancelled, connection closed',
          );
          this.count('cancelled');
          return;
        case 'deadline':
          this.ctx.worker.cancel(this.id);
          return this.fail(
            new KvfenceError('server_overloaded', `the request did not finish within ${this.ctx.requestTimeoutMs} ms`),
          );
      }
    }
  }

  /** True when a stop sequence completed. */
  private onToken(token: GeneratedToken, atMs: number): boolean {
    const m = this.ctx.metrics;
    const labels = { model_name: m.modelName };
    if (this.lastTokenMs === undefined) m.timeToFirstToken.observe(labels, (atMs - this.arrivedMs) / 1000);
    else m.interTokenLatency.observe(labels, (atMs - this.lastTokenMs) / 1000);
    m.generationTokens.inc(labels);
    this.lastTokenMs = atMs;
    this.completionTokens++;
    if (!this.parsed.stream) this.tokens.push(token);
    const step = this.text.push(token.id);
    this.addContent(step.text);
    this.writeText(step.text, token);
    return step.stopped;
  }

  private onEnd(end: GenerationEnd): void {
    if (end.kind === 'failed') {
      this.fail(end.error);
      return;
    }
    const rest = this.text.finish();
    this.addContent(rest);
    if (rest !== '') this.writeText(rest, undefined);
    this.succeed(end.reason);
  }

  private succeed(engineReason: FinishReason): void {
    const answer = this.chat?.finish(engineReason === 'length');
    if (answer !== undefined && this.parsed.stream) for (const delta of answer.deltas) this.writeDelta(delta, null);
    const calls = answer?.message.tool_calls !== undefined;
    const reason: format.ChoiceFinish = calls && engineReason === 'stop' ? 'tool_calls' : engineReason;
    this.settled = true;
    const usage = format.usageOf(this.promptTokenCount, this.completionTokens);
    const m = this.ctx.metrics;
    m.promptTokens.inc({ model_name: m.modelName }, usage.prompt_tokens);
    m.requestLatency.observe({ model_name: m.modelName }, (performance.now() - this.arrivedMs) / 1000);
    m.requestSuccess.inc({ model_name: m.modelName, finished_reason: reason });
    this.count('completed');
    this.log.info(
      { tenant: this.tenant, request: this.id, finishReason: reason, completionTokens: usage.completion_tokens },
      'request completed',
    );
    if (this.parsed.stream) {
      this.startStream();
      const final =
        this.parsed.endpoint === 'chat'
          ? format.chatChunk(this.head, {}, reason, null)
          : format.textCompletion(this.head, '', engineReason, null);
      this.sse(final);
      if (this.parsed.includeUsage) this.sse(format.usageChunk(this.head, this.parsed.endpoint, usage));
      this.writer?.end('data: [DONE]\n\n');
      return;
    }
    const logprobs = this.parsed.logprobs;
    const { tokenizer } = this.ctx.model;
    const body =
      this.parsed.endpoint === 'chat'
        ? format.chatCompletion(
            this.head,
            answer!.message,
            reason,
            usage,
            logprobs ? this.tokens.map((t) => format.chatLogprob(tokenizer, t)) : null,
          )
        : format.textCompletion(
            this.head,
            this.echoText + this.content,
            engineReason,
            logprobs ? format.completionLogprobs(tokenizer, this.tokens, 0, this.parsed.topLogprobs > 0) : null,
            usage,
          );
    this.reply.code(200).send(body);
  }

  private fail(error: KvfenceError): void {
    this.settled = true;
    const http = httpErrorOf(error, this.ctx.retryAfterS);
    this.count(http.status < 500 ? 'rejected' : 'failed');
    this.log.warn(
      { tenant: this.tenant, request: this.id, code: error.code, status: http.status },
      `request failed: ${error.message}`,
    );
    if (this.writer !== undefined) {
      // Headers are out: the failure travels as an error event, and the stream ends without [DONE] (never a success).
      this.sse(http.body);
      this.writer.end();
      return;
    }
    if (http.retryAfterS !== undefined) this.reply.header('retry-after', String(http.retryAfterS));
    this.reply.code(http.status).send(http.body);
  }

  /** Text released by a token (or at the end: `token` undefined), streamed in the endpoint's shape. */
  private writeText(text: string, token: GeneratedToken | undefined): void {
    if (!this.parsed.stream) {
      this.chat?.push(text);
      return;
    }
    const { tokenizer } = this.ctx.model;
    const { logprobs, topLogprobs } = this.parsed;
    const withLogprobs = logprobs && token !== undefined;
    if (this.chat !== undefined) {
      const deltas = this.chat.push(text);
      const lp = withLogprobs ? [format.chatLogprob(tokenizer, token)] : null;
      if (deltas.length === 0 && (token === undefined || (text !== '' && !withLogprobs))) return;
      if (deltas.length === 0) deltas.push({ content: '' }); // a token without text yet still carries its logprob
      deltas.forEach((delta, i) => {
        this.writeDelta(delta, i === 0 ? lp : null);
      });
      return;
    }
    if (token === undefined && text === '') return;
    this.startStream();
    const offset = this.echoText.length + this.contentChars - text.length;
    this.sse(
      format.textCompletion(
        this.head,
        text,
        null,
        withLogprobs ? format.completionLogprobs(tokenizer, [token], offset, topLogprobs > 0) : null,
      ),
    );
  }

  private writeDelta(delta: ChatDelta, logprobs: format.ChatTokenLogprob[] | null): void {
    this.startStream();
    this.sse(format.chatChunk(this.head, delta, null, logprobs));
  }

  private addContent(text: string): void {
    this.contentChars += text.length;
    if (!this.parsed.stream) this.content += text;
  }

  private startStream(): void {
    if (this.writer !== undefined) return;
    this.writer = new StreamWriter(this.reply.raw, this.streamBounds(), (cut) => this.onCut(cut));
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-request-id': this.id,
    });
    if (this.parsed.endpoint === 'chat')
      this.sse(format.chatChunk(this.head, { role: 'assistant', content: '' }, null, null));
    else if (this.echoText !== '') this.sse(format.textCompletion(this.head, this.echoText, null, null));
  }

  private sse(data: object): void {
    this.writer?.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  /** The client stopped reading: a running request ends as cancelled; one already answered just loses its socket. */
  private onCut(cut: StreamCut): void {
    if (!this.settled) {
      this.events?.push({ kind: 'stalled', cut });
      return;
    }
    this.log.info(
      { tenant: this.tenant, request: this.id, ...cut },
      'client did not read the end of its stream; connection closed',
    );
  }

  private count(outcome: RequestOutcome): void {
    this.ctx.metrics.requests.inc({ tenant: this.tenant, outcome });
  }
}
