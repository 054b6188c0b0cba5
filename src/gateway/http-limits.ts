/**
 * The HTTP server's own bounds (DESIGN I11: a client that never finishes a request holds nothing for long):
 *   headers     the request line and headers must arrive within headersTimeoutMs of the connection (or of the
 *               previous response): else 408 and the connection closes
 *   body        the whole request, headers and body, within bodyTimeoutMs: else 408 and close. It ends when the
 *               request has arrived: a response (a stream) is not cut by it; generation is bounded by
 *               --request-timeout-ms and a stream's reader by the stream code
 *   keep-alive  an idle connection between requests closes after keepAliveTimeoutMs
 * Node checks the first two every `connectionsCheckingInterval`, so that interval is a fraction of the shorter one.
 */
import type { ServerOptions } from 'node:http';

export interface HttpLimits {
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** connections not yet authenticated, per source address (connection-guard.ts) */
  unauthConnectionsPerAddress: number;
  /** source addresses tracked at once by that bound */
  unauthAddressesMax: number;
}

export const HTTP_DEFAULTS: HttpLimits = {
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 30_000,
  keepAliveTimeoutMs: 10_000,
  unauthConnectionsPerAddress: 128,
  unauthAddressesMax: 10_000,
};

/** how often node looks for requests past their headers or body deadline, at most */
const CHECK_INTERVAL_MS_MAX = 1_000;

/** The fastify server options that carry the bounds. */
export function httpServerOptions(limits: HttpLimits): {
  http: ServerOptions;
  requestTimeout: number;
  keepAliveTimeout: number;
} {
  // node refuses a headers timeout above the request timeout: the body bound includes the headers
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.bodyTimeoutMs);
  const checkEvery = Math.max(10, Math.min(CHECK_INTERVAL_MS_MAX, Math.floor(headersTimeout / 4)));
  return {
    http: {
      headersTimeout,
      requestTimeout: limits.bodyTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: checkEvery,
    },
    // fastify sets these two on the server again after creating it: the same values
    requestTimeout: limits.bodyTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
  };
}
