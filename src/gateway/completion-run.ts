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
import { requestPages } from '../engine/choice-group.js';
import type { InferenceWorker } from '../engine/inference-worker.js';
import type { FinishReason, GeneratedToken, GenerationEnd, GenerationRequest } from '../engine/request.js';
import { clientText, KvfenceError } from '../util/errors.js';
import { jsonSteps } from '../util/json-steps.js';
import { LIMITS } from '../util/limits.js';
import { finishInTurns, mapSteps, type Steps } from '../util/steps.js';
import type { ChatDelta, ChatMessageOut } from './chat-output.js';
import { ChoiceState } from './choice-state.js';
import { httpErrorOf } from './errors.js';
import type { GatewayMetrics, RequestOutcome } from './metrics.js';
import * as format from './openai-format.js';
import { RequestEvents } from './request-events.js';
import type { ParsedRequest } from './schemas.js';
import { promptTokens, type ServedModel } from './served-model.js';
import { type StreamBounds, type StreamCut, StreamWriter } from './stream-writer.js';
import type { TenantGate } from './tenant-gate.js';
import type { TenantDirectory } from './tenants.js';
import { charCount } from './text-stream.js';

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

/** An answer as it ended: the engine's reason, the one the client reads, and a chat answer's message. */
interface Finished {
  out: ChoiceState;
  reason: FinishReason;
  finish: format.ChoiceFinish;
  answer: { deltas: ChatDelta[]; message: ChatMessageOut } | undefined;
}

/** A non-streamed answer's formatting gives the event loop back after this long (steps.ts finishInTurns) */
const ANSWER_SLICE_MS = 5;

export class CompletionRun {
  private readonly id: string;
  private readonly head: format.ResponseHead;
  private readonly arrivedMs = performance.now();
  /** the n answers */
  private readonly choices: ChoiceState[];
  /** completions with echo: the prompt's text, first in each answer */
  private echoText = '';
  /** its length as text_offset counts (charCount) */
  private echoChars = 0;
  /** a completions stream with echo: its first events, written before the first token (echoEventSteps) */
  private echoEvents = '';
  private promptTokenCount = 0;
  private firstTokenSeen = false;
  /** set once the stream's headers are out */
  private writer: StreamWriter | undefined;
  private events: RequestEvents | undefined;
  private settled = false;

  constructor(
    protected readonly ctx: GatewayContext,
    private readonly parsed: ParsedRequest,
    private readonly tenant: string,
    private readonly reply: FastifyReply,
    /** its lines carry the tenant already */
    private readonly log: FastifyBaseLogger,
  ) {
    this.id = `${parsed.endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
    this.head = { id: this.id, created: Math.floor(Date.now() / 1000), model: ctx.model.id };
    this.choices = Array.from(
      { length: parsed.n },
      (_, i) => new ChoiceState(i, ctx.model.tokenizer, parsed, ctx.model.toolCallFormat),
    );
  }

  /** Validates and submits (throwing a KvfenceError → the error handler), then serves the request to its end. */
  async run(): Promise<void> {
    // listening from the start: a client that goes away while its prompt is prepared (the chat template, the tokenizer
    // thread, perhaps queued behind others) is cancelled at the gate, before it takes a place or a page
    const gone = new AbortController();
    this.reply.raw.on('close', () => gone.abort());
    // every answer and refusal from here on names the request, as a stream's head does (clients read it as request_id)
    this.reply.header('x-request-id', this.id);
    const request = await this.prepare();
    const { ctx } = this;
    const pages = requestPages(ctx.pageSize, request.promptTokens.length, request.maxTokens, this.parsed.n);
    const lease = await ctx.gate.enter(this.tenant, pages, ctx.queueTimeoutMs, gone.signal);
    const events = new RequestEvents(ctx.requestTimeoutMs);
    this.events = events;
    try {
      ctx.worker.submit(request, events);
      this.log.info(
        {
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
    const prompt = await promptTokens(this.ctx.model, this.parsed.prompt, this.ctx.context, this.tenant, tools);
    return { prompt, maxTokens: this.parsed.maxTokens ?? defaultMaxTokens(prompt.length, this.parsed.n, this.ctx) };
  }

  private async prepare(): Promise<GenerationRequest> {
    const { parsed, ctx } = this;
    if (parsed.model !== ctx.model.id)
      throw new KvfenceError('model_not_found', `The model '${clientText(parsed.model)}' does not exist`, 'model');
    // the output grammar's check before the prompt's tokens: on the tokenizer thread, bounded per tenant
    await ctx.model.encoder.checkGrammars(parsed.grammarChecks, this.tenant);
    const { prompt, maxTokens } = await this.promptAndMaxTokens();
    // I2: what can never fit is rejected here, before any reservation. A default length of no tokens at all is n's
    // doing, not the prompt's, when the prompt fits: checkChoicesFit names n then
    const tooLong = contextError(
      prompt.length,
      Math.max(1, maxTokens),
      ctx.context,
      parsed.endpoint === 'chat' ? 'messages' : 'prompt',
    );
    if (tooLong !== undefined) throw tooLong;
    checkChoicesFit(prompt.length, maxTokens, parsed.n, ctx);
    this.promptTokenCount = prompt.length;
    if (parsed.sampling.minTokens > maxTokens)
      throw new KvfenceError('invalid_request_error', 'min_tokens must not exceed max_tokens', 'min_tokens');
    // the echo's decoding once nothing can refuse the request any more, not for a request a check then refuses (I11
    // review); past INLINE_IDS on a tokenizer thread (131,000 of the longest ids held the event loop 118–246 ms)
    if (parsed.echo) {
      this.echoText =
        parsed.prompt.kind === 'text' ? parsed.prompt.text : await ctx.model.encoder.decode(prompt, this.tenant);
      this.echoChars = charCount(this.echoText);
      if (parsed.n > 1 && parsed.n * this.echoText.length > LIMITS.echoCharsMax)
        throw new KvfenceError(
          'invalid_request_error',
          `echo with n = ${parsed.n} repeats a prompt of ${this.echoText.length} characters in each answer: at most ` +
            `${LIMITS.echoCharsMax} characters in all`,
          'echo',
        );
      // a stream's first chunks, one a choice, each carrying the whole prompt: written in turns now, sent at once
      if (parsed.stream) this.echoEvents = await finishInTurns(this.echoEventSteps(), ANSWER_SLICE_MS);
    }
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
      ...(parsed.logprobs ? {} : { logprobs: false }),
      // the cluster-wide quota: workers count the tenant's requests from every gateway together, and each gateway's
      // gate holds only its share, so a worker holding a share would let one gateway's requests wait on another's
      tenantKvPagesMax: ctx.tenants.clusterLimitsOf(this.tenant).kvPagesMax,
      ...(parsed.constraint !== undefined ? { constraint: parsed.constraint } : {}),
      ...(parsed.n > 1 ? { choices: parsed.n } : {}),
    };
  }

  private async serve(events: RequestEvents): Promise<void> {
    for (;;) {
      const event = await events.next();
      switch (event.kind) {
        case 'token':
          if (this.onToken(event.token, event.choice, event.atMs)) {
            this.ctx.worker.cancel(this.id); // stop sequences ended every answer here
            return this.succeed(undefined);
          }
          break;
        case 'end':
          return this.onEnd(event.end);
        case 'disconnected':
          this.ctx.worker.cancel(this.id);
          this.settled = true;
          this.log.info(
            { request: this.id, completionTokens: this.completionTokens() },
            'client disconnected; request cancelled',
          );
          this.count('cancelled');
          return;
        case 'stalled':
          // the writer has closed the connection already; the rest is a disconnect's ending
          this.ctx.worker.cancel(this.id);
          this.settled = true;
          this.log.info(
            { request: this.id, completionTokens: this.completionTokens(), ...event.cut },
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

  /** True when stop sequences have ended every answer. */
  private onToken(token: GeneratedToken, index: number, atMs: number): boolean {
    const out = this.choices[index];
    if (out === undefined || out.ended !== undefined) return false; // an answer a stop sequence already ended
    const m = this.ctx.metrics;
    const labels = { model_name: m.modelName };
    if (!this.firstTokenSeen) m.timeToFirstToken.observe(labels, (atMs - this.arrivedMs) / 1000);
    else if (out.lastTokenMs !== undefined) m.interTokenLatency.observe(labels, (atMs - out.lastTokenMs) / 1000);
    this.firstTokenSeen = true;
    m.generationTokens.inc(labels);
    out.lastTokenMs = atMs;
    out.completionTokens++;
    const offset = out.nextOffset;
    if (!this.parsed.stream) {
      out.tokens.push(token);
      out.offsets.push(offset);
    }
    const step = out.text.push(token.id);
    out.addContent(step.text, !this.parsed.stream);
    this.writeText(out, step.text, { token, offset });
    if (!step.stopped) return false;
    out.ended = 'stop';
    if (this.choices.every((c) => c.ended !== undefined)) return true;
    this.ctx.worker.endChoice(this.id, index); // the others run on; this one's compute and pages go back now
    return false;
  }

  private async onEnd(end: GenerationEnd): Promise<void> {
    if (end.kind === 'failed') {
      this.fail(end.error);
      return;
    }
    for (const out of this.choices) {
      if (out.ended !== undefined) continue;
      out.ended = end.choices?.[out.index]?.reason ?? end.reason;
      const rest = out.text.finish();
      out.addContent(rest, !this.parsed.stream);
      if (rest !== '') this.writeText(out, rest, undefined);
    }
    await this.succeed(end.reason);
  }

  /** Every answer has its ending (`ended`); `last` the engine's, undefined when stop sequences ended them all. */
  private async succeed(last: FinishReason | undefined): Promise<void> {
    this.settled = true;
    const finished = this.choices.map((out): Finished => {
      const reason = out.ended ?? 'stop';
      const answer = out.chat?.finish(reason === 'length');
      if (answer !== undefined && this.parsed.stream)
        for (const delta of answer.deltas) this.writeDelta(out, delta, null);
      const calls = answer?.message.tool_calls !== undefined;
      const finish: format.ChoiceFinish = calls && reason === 'stop' ? 'tool_calls' : reason;
      return { out, reason, finish, answer };
    });
    const usage = format.usageOf(this.promptTokenCount, this.completionTokens());
    const m = this.ctx.metrics;
    m.promptTokens.inc({ model_name: m.modelName }, usage.prompt_tokens);
    m.requestLatency.observe({ model_name: m.modelName }, (performance.now() - this.arrivedMs) / 1000);
    for (const { finish } of finished) m.requestSuccess.inc({ model_name: m.modelName, finished_reason: finish });
    this.count('completed');
    this.log.info(
      {
        request: this.id,
        finishReason: finished.map((f) => f.finish).join(','),
        engineReason: last,
        completionTokens: usage.completion_tokens,
      },
      'request completed',
    );
    if (this.parsed.stream) {
      this.startStream();
      for (const { out, reason, finish } of finished)
        this.sse(
          this.parsed.endpoint === 'chat'
            ? format.chatChunk(this.head, out.index, {}, finish, null)
            : format.textCompletion(this.head, [{ text: '', finish: reason, logprobs: null }], undefined, out.index),
        );
      if (this.parsed.includeUsage) this.sse(format.usageChunk(this.head, this.parsed.endpoint, usage));
      this.writer?.end('data: [DONE]\n\n');
      return;
    }
    // an answer's logprobs and its JSON are written in turns with other work: 2,000 tokens with 20 alternatives each
    // held the event loop ~60–90 ms for the logprobs and ~50–120 ms more for the JSON (~5 MB)
    const json = await finishInTurns(this.answerJson(finished, usage), ANSWER_SLICE_MS);
    this.reply.code(200).type('application/json; charset=utf-8').send(json);
  }

  /** A non-streamed answer's JSON, in steps. */
  private *answerJson(finished: readonly Finished[], usage: format.Usage): Steps<string> {
    const { logprobs, topLogprobs } = this.parsed;
    const { tokenizer } = this.ctx.model;
    if (this.parsed.endpoint === 'chat') {
      const choices: format.ChatChoice[] = [];
      for (const { out, finish, answer } of finished) {
        const lp = logprobs
          ? yield* mapSteps(out.tokens, (t) => format.chatLogprob(tokenizer, t), format.LOGPROB_TOKENS_STEP)
          : null;
        choices.push({ message: answer!.message, finish, logprobs: lp });
      }
      return yield* jsonSteps(format.chatCompletion(this.head, choices, usage));
    }
    const choices: format.TextChoice[] = [];
    for (const { out, reason } of finished) {
      const offsets = out.offsets.map((at) => this.echoChars + at);
      const lp = logprobs
        ? yield* format.completionLogprobsSteps(tokenizer, out.tokens, offsets, topLogprobs > 0)
        : null;
      choices.push({ text: this.echoText + out.content, finish: reason, logprobs: lp });
    }
    return yield* jsonSteps(format.textCompletion(this.head, choices, usage));
  }

  private completionTokens(): number {
    return this.choices.reduce((sum, out) => sum + out.completionTokens, 0);
  }

  private fail(error: KvfenceError): void {
    this.settled = true;
    const http = httpErrorOf(error, this.ctx.retryAfterS);
    this.count(http.status < 500 ? 'rejected' : 'failed');
    this.log.warn({ request: this.id, code: error.code, status: http.status }, `request failed: ${error.message}`);
    if (this.writer !== undefined) {
      // Headers are out: the failure travels as an error event, and the stream ends without [DONE] (never a success).
      this.sse(http.body);
      this.writer.end();
      return;
    }
    if (http.retryAfterS !== undefined) this.reply.header('retry-after', String(http.retryAfterS));
    this.reply.code(http.status).send(http.body);
  }

  /**
   * Text released by a token (or at the end: `by` undefined), streamed in the endpoint's shape; `by.offset` is where
   * the token's own text starts in the answer (ChoiceState.nextOffset), which the released text may not.
   */
  private writeText(out: ChoiceState, text: string, by: { token: GeneratedToken; offset: number } | undefined): void {
    if (!this.parsed.stream) {
      out.chat?.push(text);
      return;
    }
    const { tokenizer } = this.ctx.model;
    const { logprobs, topLogprobs } = this.parsed;
    const withLogprobs = logprobs && by !== undefined;
    if (out.chat !== undefined) {
      const deltas = out.chat.push(text);
      const lp = withLogprobs ? [format.chatLogprob(tokenizer, by.token)] : null;
      if (deltas.length === 0 && (by === undefined || (text !== '' && !withLogprobs))) return;
      if (deltas.length === 0) deltas.push({ content: '' }); // a token without text yet still carries its logprob
      deltas.forEach((delta, i) => {
        this.writeDelta(out, delta, i === 0 ? lp : null);
      });
      return;
    }
    if (by === undefined && text === '') return;
    this.startStream();
    const lp = withLogprobs
      ? format.completionLogprobs(tokenizer, [by.token], [this.echoChars + by.offset], topLogprobs > 0)
      : null;
    this.sse(format.textCompletion(this.head, [{ text, finish: null, logprobs: lp }], undefined, out.index));
  }

  private writeDelta(out: ChoiceState, delta: ChatDelta, logprobs: format.ChatTokenLogprob[] | null): void {
    this.startStream();
    this.sse(format.chatChunk(this.head, out.index, delta, null, logprobs));
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
    for (const { index } of this.choices) {
      if (this.parsed.endpoint === 'chat')
        this.sse(format.chatChunk(this.head, index, { role: 'assistant', content: '' }, null, null));
    }
    // one write, so that the stream's allowance for its first chunk covers every choice's echo (stream-writer.ts)
    if (this.echoEvents !== '') this.writer.write(this.echoEvents);
  }

  /** A completions stream's first events when it echoes its prompt: one a choice, each carrying the prompt. */
  private *echoEventSteps(): Steps<string> {
    let events = '';
    for (const { index } of this.choices) {
      const chunk = format.textCompletion(
        this.head,
        [{ text: this.echoText, finish: null, logprobs: null }],
        undefined,
        index,
      );
      events += `data: ${yield* jsonSteps(chunk)}\n\n`;
    }
    return events;
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
    this.log.info({ request: this.id, ...cut }, 'client did not read the end of its stream; connection closed');
  }

  private count(outcome: RequestOutcome): void {
    this.ctx.metrics.requests.inc({ tenant: this.tenant, outcome });
  }
}

/** Without max_tokens: as long as the context allows, the n answers together within one full-context request's pages. */
function defaultMaxTokens(promptLength: number, n: number, ctx: GatewayContext): number {
  if (n === 1) return ctx.context - promptLength;
  const head = Math.floor(promptLength / ctx.pageSize);
  const tailPages = Math.floor((Math.ceil(ctx.context / ctx.pageSize) - head) / n);
  return Math.min(ctx.context - promptLength, tailPages * ctx.pageSize - (promptLength - head * ctx.pageSize));
}

/**
 * n answers share the prompt's pages but each holds its own tail: together they must fit the pages of one
 * full-context request, which the capacity proof (I1) and every tenant's quota cover. Otherwise a 400, nothing reserved.
 */
function checkChoicesFit(promptLength: number, maxTokens: number, n: number, ctx: GatewayContext): void {
  const pages = requestPages(ctx.pageSize, promptLength, maxTokens, n);
  const most = Math.ceil(ctx.context / ctx.pageSize);
  if (n > 1 && (maxTokens < 1 || pages > most))
    throw new KvfenceError(
      'context_length_exceeded',
      `n = ${n} answers of up to ${maxTokens} tokens after a ${promptLength}-token prompt need ${pages} KV pages of ` +
        `${ctx.pageSize} tokens; one request may hold ${most} (the ${ctx.context}-token context): lower n or max_tokens`,
      'n',
    );
}
