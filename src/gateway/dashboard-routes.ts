/**
 * /dashboard: the operator's live KV page map (docs/serving.md, "Dashboard"). Everything under it answers only to the
 * admin token: presented once by the login form (POST /dashboard/login) or `?token=`, it is traded for a session
 * cookie (dashboard-sessions.ts) and the browser is sent back to /dashboard, so the token leaves the address bar at
 * once and is never in a page. Scripts and the feed also take `Authorization: Bearer <admin token>` (curl, tests).
 * Without --admin-token-file the dashboard is off (404), and API keys never open it.
 *
 *   GET  /dashboard              the page (signed in), else the login form (401)
 *   POST /dashboard/login        form field `token` → session cookie, 303 to /dashboard
 *   GET  /dashboard/events       the SSE feed (dashboard-hub.ts)
 *   GET  /dashboard/client.js    the page's script (compiled from dashboard/client.ts, next to this file in dist)
 *   GET  /dashboard/uplot.js|css the charting library, from node_modules (no CDN: the operator may have no internet)
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AdminToken } from './admin-token.js';
import { DashboardHub, type DashboardSource } from './dashboard-hub.js';
import { dashboardOffPage, dashboardPage, loginPage } from './dashboard-page.js';
import { DashboardSessions, sessionCookie } from './dashboard-sessions.js';

/** a login form holds one token: anything larger is not one */
const LOGIN_BODY_BYTES_MAX = 4096;

export interface DashboardOptions {
  /** undefined: the dashboard is off */
  adminToken: AdminToken | undefined;
  /** what the feed reads: the worker(s), the tenant gate, the metrics */
  source: DashboardSource;
  /** an authorized dashboard request's connection stops counting as unauthenticated (connection-guard.ts) */
  onAuthorized: (request: FastifyRequest) => void;
}

/** Whether a route is the dashboard's: the API-key check leaves these to the dashboard's own. */
export function isDashboardRoute(route: string): boolean {
  return route === '/dashboard' || route.startsWith('/dashboard/');
}

const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  // the address may have carried ?token=: never send it on
  'referrer-policy': 'no-referrer',
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
};

export function registerDashboardRoutes(app: FastifyInstance, options: DashboardOptions): void {
  const { adminToken } = options;
  const hub = new DashboardHub(options.source);
  const sessions = new DashboardSessions();
  const assets = new DashboardAssets();
  app.addHook('preClose', async () => hub.close());

  const authorized = (request: FastifyRequest): boolean => {
    const ok =
      adminToken !== undefined &&
      (sessions.valid(request.headers.cookie) || adminToken.matches(request.headers.authorization));
    if (ok) options.onAuthorized(request);
    return ok;
  };
  const signIn = (token: unknown, reply: FastifyReply) => {
    if (adminToken === undefined) return reply.code(404).headers(PAGE_HEADERS).send(dashboardOffPage());
    if (typeof token !== 'string' || !adminToken.matchesToken(token))
      return reply.code(401).headers(PAGE_HEADERS).send(loginPage(true));
    return reply
      .code(303)
      .headers({ ...PAGE_HEADERS, 'set-cookie': sessionCookie(sessions.create()), location: '/dashboard' })
      .send();
  };

  app.get('/dashboard', async (request, reply) => {
    if (adminToken === undefined) return reply.code(404).headers(PAGE_HEADERS).send(dashboardOffPage());
    const token = queryToken(request.query);
    if (token !== undefined) return signIn(token, reply);
    if (!authorized(request)) return reply.code(401).headers(PAGE_HEADERS).send(loginPage(false));
    return reply.headers(PAGE_HEADERS).send(dashboardPage());
  });

  // the form's body type is parsed only here (an encapsulated scope): the API routes still refuse it. The login takes no
  // API key, so it takes nothing else either, and nothing larger than a form: any other body (JSON, which would go to
  // the shared body-parsing thread) is refused before it is read (400, unsupported media type), and so is an announced
  // larger one (413)
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: LOGIN_BODY_BYTES_MAX },
      (_request, body, done) => done(null, new URLSearchParams(String(body))),
    );
    scope.post('/dashboard/login', { bodyLimit: LOGIN_BODY_BYTES_MAX }, async (request, reply) => {
      const form = request.body instanceof URLSearchParams ? request.body : new URLSearchParams();
      return signIn(form.get('token') ?? undefined, reply);
    });
  });

  app.get('/dashboard/events', async (request, reply) => {
    if (!authorized(request)) return unauthorized(reply);
    reply.hijack();
    if (!hub.attach(reply.raw)) {
      reply.raw.writeHead(503, { 'content-type': 'application/json', 'retry-after': '5' });
      reply.raw.end(JSON.stringify({ error: { message: 'too many dashboards are open', code: 'server_overloaded' } }));
    }
    return reply;
  });

  const asset = (path: string, type: string, read: () => string) =>
    app.get(path, async (request, reply) => {
      if (!authorized(request)) return unauthorized(reply);
      return reply
        .headers({ 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' })
        .send(read());
    });
  asset('/dashboard/client.js', 'text/javascript; charset=utf-8', () => assets.client());
  asset('/dashboard/uplot.js', 'text/javascript; charset=utf-8', () => assets.uplotScript());
  asset('/dashboard/uplot.css', 'text/css; charset=utf-8', () => assets.uplotStyle());
}

function unauthorized(reply: FastifyReply): FastifyReply {
  return reply.code(401).send({
    error: { message: 'the dashboard needs the admin token (sign in at /dashboard)', code: 'invalid_api_key' },
  });
}

function queryToken(query: unknown): string | undefined {
  if (typeof query !== 'object' || query === null || !('token' in query)) return undefined;
  return typeof query.token === 'string' ? query.token : '';
}

/** The static files, read once on first use (the dashboard may never be opened). */
class DashboardAssets {
  private readonly cache = new Map<string, string>();
  private readonly require = createRequire(import.meta.url);

  client(): string {
    // the compiled script's source-map comment points at a file the route does not serve
    return this.read('client', () =>
      readFileSync(new URL('./dashboard/client.js', import.meta.url), 'utf8').replace(
        /\n\/\/# sourceMappingURL=.*$/,
        '',
      ),
    );
  }

  uplotScript(): string {
    return this.read('uplot.js', () => readFileSync(this.require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'));
  }

  uplotStyle(): string {
    return this.read('uplot.css', () => readFileSync(this.require.resolve('uplot/dist/uPlot.min.css'), 'utf8'));
  }

  private read(key: string, load: () => string): string {
    let text = this.cache.get(key);
    if (text === undefined) {
      text = load();
      this.cache.set(key, text);
    }
    return text;
  }
}
