/**
 * The OpenAI-compatible HTTP gateway (fastify): authenticates keys → tenants, validates, and hands each completion to
 * a CompletionRun over an InferenceWorker. Errors of every route become OpenAI-shaped bodies in the one error handler
 * (statuses from errors.ts). /health and /metrics need no key; everything under /v1, /tokenize and /detokenize does
 * (unless in dev mode).
 */
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { InferenceWorker } from '../engine/inference-worker.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { CompletionRun, type CompletionRunClass, type GatewayContext } from './completion-run.js';
import { httpErrorOf } from './errors.js';
import { GatewayMetrics } from './metrics.js';
import { type ParsedRequest, parseChatRequest, parseCompletionRequest } from './schemas.js';
import type { ServedModel } from './served-model.js';
import { TenantGate } from './tenant-gate.js';
import type { TenantDirectory } from './tenants.js';
import { registerTokenizeRoutes } from './tokenize-routes.js';

export interface GatewayOptions {
  model: ServedModel;
  worker: InferenceWorker;
  tenants: TenantDirectory;
  /** a pino logger (silent in tests) */
  logger: FastifyBaseLogger;
  /** the advertised context: the workers' proof, checked against every tenant's quota (see proveTenantQuotas) */
  context: number;
  queueTimeoutMs: number;
  requestTimeoutMs: number;
  retryAfterS: number;
  /** the completion handler; default CompletionRun (the mutation self-test hands in a subclass) */
  completionRun?: CompletionRunClass;
}

export interface Gateway {
  app: FastifyInstance;
  metrics: GatewayMetrics;
  gate: TenantGate;
}

export function buildGateway(options: GatewayOptions): Gateway {
  const { model, worker, tenants } = options;
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: LIMITS.requestBodyBytesMax,
    // fastify's own per-request lines come before authentication, so they could not carry the tenant; ours do
    logController: new LogController({ disableRequestLogging: true }),
  });
  const gate = new TenantGate((tenant) => tenants.limitsOf(tenant));
  const metrics = new GatewayMetrics(worker, model.id, tenants.tenants(), () => gate.waitingCount);
  const ctx: GatewayContext = {
    model,
    worker,
    metrics,
    tenants,
    gate,
    context: options.context,
    pageSize: worker.pageSize,
    queueTimeoutMs: options.queueTimeoutMs,
    requestTimeoutMs: options.requestTimeoutMs,
    retryAfterS: options.retryAfterS,
  };
  const Run = options.completionRun ?? CompletionRun;
  const tenantOf = new WeakMap<FastifyRequest, string>();

  const authenticate = (request: FastifyRequest): string => {
    const tenant = tenants.authenticate(request.headers.authorization);
    if (tenant === undefined) {
      throw new KvfenceError(
        'invalid_api_key',
        'Incorrect API key provided. Pass "Authorization: Bearer <key>" with a key from the key file.',
      );
    }
    tenantOf.set(request, tenant);
    return tenant;
  };

  const completion =
    (parse: (body: unknown, vocabSize: number) => ParsedRequest) =>
    async (request: FastifyRequest, reply: FastifyReply) => {
      const tenant = authenticate(request);
      const parsed = parse(request.body, model.vocabSize);
      await new Run(ctx, parsed, tenant, reply, request.log.child({ tenant })).run();
      return reply;
    };

  app.post('/v1/chat/completions', completion(parseChatRequest));
  app.post('/v1/completions', completion(parseCompletionRequest));
  registerTokenizeRoutes(app, model, () => options.context, authenticate);

  const modelCard = () => ({
    id: model.id,
    object: 'model',
    created: model.createdS,
    owned_by: 'kvfence',
    // the proven context (I1), never the file's claim
    max_model_len: options.context,
  });
  app.get('/v1/models', async (request) => {
    authenticate(request);
    return { object: 'list', data: [modelCard()] };
  });
  app.get<{ Params: { id: string } }>('/v1/models/:id', async (request) => {
    authenticate(request);
    if (request.params.id !== model.id)
      throw new KvfenceError('model_not_found', `The model '${request.params.id}' does not exist`, 'model');
    return modelCard();
  });

  app.get('/health', async () => {
    await worker.refresh?.();
    const s = worker.stats();
    const workers = worker.workers?.();
    return {
      status: 'ok',
      running: s.running,
      waiting: s.waiting + gate.waitingCount,
      kvPagesFree: s.pagesFree,
      kvPagesTotal: s.pagesTotal,
      ...(workers !== undefined ? { workers } : {}),
    };
  });
  app.get('/metrics', async (_request, reply) => {
    await worker.refresh?.();
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });

  app.setNotFoundHandler((request, reply) => {
    const http = httpErrorOf(new KvfenceError('not_found', `no route ${request.method} ${request.url}`));
    reply.code(http.status).send(http.body);
  });
  app.setErrorHandler((error: unknown, request, reply) => {
    const http = httpErrorOf(asKvfenceError(error), options.retryAfterS);
    const tenant = tenantOf.get(request);
    if (http.status >= 500) request.log.error({ tenant, err: error }, 'request failed');
    else
      request.log.info(
        { tenant, status: http.status, code: http.body.error.code },
        `request rejected: ${http.body.error.message}`,
      );
    if (tenant !== undefined) metrics.requests.inc({ tenant, outcome: http.status < 500 ? 'rejected' : 'failed' });
    if (http.retryAfterS !== undefined) reply.header('retry-after', String(http.retryAfterS));
    reply.code(http.status).send(http.body);
  });
  return { app, metrics, gate };
}

/** Framework errors (bad JSON, body too large, wrong content type) are the client's: 400 with their message. */
function asKvfenceError(error: unknown): unknown {
  if (error instanceof KvfenceError) return error;
  if (
    typeof error === 'object' &&
    error !== null &&
    'statusCode' in error &&
    typeof error.statusCode === 'number' &&
    error.statusCode < 500
  ) {
    const message = 'message' in error && typeof error.message === 'string' ? error.message : 'bad request';
    return new KvfenceError('invalid_request_error', message);
  }
  return error;
}
