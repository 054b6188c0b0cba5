/**
 * The OpenAI-compatible HTTP gateway (fastify): authenticates keys → tenants, validates, and hands each completion to
 * a CompletionRun over an InferenceWorker. Errors of every route become OpenAI-shaped bodies in the one error handler
 * (statuses from errors.ts).
 *
 * The key is checked in an onRequest hook, before any body is read: a request without a valid key is a 401 and its
 * connection closes, so a stranger cannot keep uploading (DESIGN I11). An unknown route is a 404 from the same hook,
 * for anyone (fastify would read its body first); a GET or HEAD that announces a body is a 400 there too (node would
 * read it all to drop it). /health, /health/live, /health/ready and /metrics need no key (/metrics' per-tenant series
 * need the admin token); /dashboard and below answer to the admin token alone (dashboard-routes.ts); every other
 * route needs a key (unless in dev mode). The body limit,
 * timeouts and per-address bound on unauthenticated connections are in body-limit.ts, http-limits.ts and
 * connection-guard.ts; large JSON bodies are parsed off the event loop (json-body.ts).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { InferenceWorker } from '../engine/inference-worker.js';
import { KvfenceError } from '../util/errors.js';
import type { AdminToken } from './admin-token.js';
import { bodyAs } from './body-readers.js';
import { CompletionRun, type CompletionRunClass, type GatewayContext } from './completion-run.js';
import { ConnectionGuard } from './connection-guard.js';
import { isDashboardRoute, registerDashboardRoutes } from './dashboard-routes.js';
import { bodyTooLargeError, httpErrorOf } from './errors.js';
import { registerHealthRoutes, type ServingState } from './health-routes.js';
import {
  closesAfterRefusal,
  type HttpLimits,
  httpServerOptions,
  lingerOnClose,
  refusalLingerMs,
} from './http-limits.js';
import { JsonBodyParser } from './json-body.js';
import { GatewayMetrics, type RequestOutcome } from './metrics.js';
import type { ServedModel } from './served-model.js';
import { TenantGate } from './tenant-gate.js';
import type { TenantDirectory } from './tenants.js';
import { registerTokenizeRoutes } from './tokenize-routes.js';

/** a large body's parse is answered within this or refused (503): it runs off the event loop, bounded */
const BODY_PARSE_TIMEOUT_MS = 10_000;

/** routes any client may call; everything else needs a key */
const PUBLIC_ROUTES: ReadonlySet<string> = new Set(['/health', '/health/live', '/health/ready', '/metrics']);

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
  /** the largest request body read (body-limit.ts); larger is a 413 */
  bodyLimitBytes: number;
  http: HttpLimits;
  /** who may read /metrics' per-tenant series; undefined: nobody (they are left out) */
  adminToken?: AdminToken;
  /** the completion handler; default CompletionRun (the mutation self-test hands in a subclass) */
  completionRun?: CompletionRunClass;
}

export interface Gateway {
  app: FastifyInstance;
  metrics: GatewayMetrics;
  gate: TenantGate;
  /** set `shuttingDown` before the workers stop: /health/ready turns 503 */
  state: ServingState;
}

export function buildGateway(options: GatewayOptions): Gateway {
  const { model, worker, tenants } = options;
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimitBytes,
    ...httpServerOptions(options.http),
    // fastify's own per-request lines come before authentication, so they could not carry the tenant; ours do
    logController: new LogController({ disableRequestLogging: true }),
  });
  const bodies = new JsonBodyParser(BODY_PARSE_TIMEOUT_MS, { id: model.id, vocabSize: model.vocabSize });
  app.addHook('onClose', () => Promise.all([model.encoder.close(), bodies.close()]));
  const guard = new ConnectionGuard({
    perAddressMax: options.http.unauthConnectionsPerAddress,
    addressesMax: options.http.unauthAddressesMax,
    onRefused: (address, why) => options.logger.debug({ address, why }, 'unauthenticated connection refused'),
  });
  app.server.on('connection', (socket: Socket) => guard.accept(socket));
  const state: ServingState = { shuttingDown: false };
  const gate = new TenantGate((tenant) => tenants.limitsOf(tenant));
  const metrics = new GatewayMetrics(
    worker,
    model.id,
    tenants.tenants(),
    () => gate.waitingCount,
    () => guard.count,
  );
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
  const lingerMs = refusalLingerMs(options.http);
  // JSON bodies as fastify parses them, but a large one off the event loop, bounded per tenant (json-body.ts)
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request: FastifyRequest, body: Buffer) =>
    bodies.parse(body, tenantOf.get(request) ?? '', request.routeOptions.url),
  );

  // before the body is read (the content-type parser runs after onRequest): a stranger's upload is never parsed
  app.addHook('onRequest', async (request, reply) => {
    // pipelined behind a refusal that closes the connection: never run, nothing written; the connection closes once
    // the refusal is out
    if (closesAfterRefusal(request.raw.socket)) return reply.hijack();
    const route = request.routeOptions.url;
    if (route === undefined) throw new KvfenceError('not_found', `no route ${request.method} ${request.url}`);
    // fastify ignores a GET's body and node reads it all to drop it, for up to the body timeout: on a route open to
    // all, a stranger's endless upload was read at full speed
    if ((request.method === 'GET' || request.method === 'HEAD') && declaresBody(request.headers))
      throw new KvfenceError('invalid_request_error', `${request.method} ${route} takes no body`);
    if (PUBLIC_ROUTES.has(route) || isDashboardRoute(route)) return; // the dashboard checks the admin token itself
    const tenant = tenants.authenticate(request.headers.authorization);
    if (tenant === undefined) {
      throw new KvfenceError(
        'invalid_api_key',
        'Incorrect API key provided. Pass "Authorization: Bearer <key>" with a key from the key file.',
      );
    }
    tenantOf.set(request, tenant);
    guard.authenticated(request.raw.socket);
  });
  /** The tenant the onRequest hook found (every non-public route has one). */
  const authenticate = (request: FastifyRequest): string => {
    const tenant = tenantOf.get(request);
    if (tenant === undefined) throw new KvfenceError('internal_error', 'a keyed route ran without authentication');
    return tenant;
  };

  const completion = (reader: 'chat' | 'completion') => async (request: FastifyRequest, reply: FastifyReply) => {
    const tenant = authenticate(request);
    const parsed = bodyAs(request.body, reader); // read where the body was parsed (body-readers.ts)
    await new Run(ctx, parsed, tenant, reply, request.log.child({ tenant })).run();
    return reply;
  };

  app.post('/v1/chat/completions', completion('chat'));
  app.post('/v1/completions', completion('completion'));
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

  registerHealthRoutes(app, worker, state, () => gate.waitingCount);
  registerDashboardRoutes(app, {
    adminToken: options.adminToken,
    source: { worker, gate, metrics, log: options.logger },
    onAuthorized: (request) => guard.authenticated(request.raw.socket),
  });
  app.get('/metrics', async (request, reply) => {
    await worker.refresh?.();
    const registry = options.adminToken?.matches(request.headers.authorization) ? metrics.full : metrics.registry;
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });

  app.setErrorHandler((error: unknown, request, reply) => {
    const http = isBodyTooLarge(error)
      ? bodyTooLargeError(options.bodyLimitBytes, options.context)
      : httpErrorOf(asKvfenceError(error), options.retryAfterS);
    // a stranger's connection, or one whose body was refused unread, closes after this response, in stages (the rest
    // of the upload read and dropped for a bounded time, so the client reads this answer and not a reset): node would
    // otherwise read (and drop) all of the upload to reuse the connection
    if (http.status === 401 || !request.raw.complete) {
      reply.header('connection', 'close');
      lingerOnClose(request.raw, lingerMs);
    }
    const tenant = tenantOf.get(request);
    if (http.status >= 500) request.log.error({ tenant, err: error }, 'request failed');
    else
      request.log.info(
        { tenant, status: http.status, code: http.body.error.code },
        `request rejected: ${http.body.error.message}`,
      );
    if (tenant !== undefined) metrics.requests.inc({ tenant, outcome: outcomeOf(http) });
    if (http.retryAfterS !== undefined) reply.header('retry-after', String(http.retryAfterS));
    reply.code(http.status).send(http.body);
  });
  return { app, metrics, gate, state };
}

/** The request announces a body (a length other than 0, or chunks). */
function declaresBody(headers: IncomingHttpHeaders): boolean {
  const length = headers['content-length'];
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

function isBodyTooLarge(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'statusCode' in error && error.statusCode === 413;
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

/** How a request that ended in an error response counts: a client that went away first is cancelled, not rejected */
function outcomeOf(http: { status: number; body: { error: { code: string } } }): RequestOutcome {
  if (http.body.error.code === 'request_cancelled') return 'cancelled';
  return http.status < 500 ? 'rejected' : 'failed';
}
