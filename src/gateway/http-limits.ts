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
import type { Socket } from 'node:net';

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

/** the longest a refused request's connection reads what its client still sends before it is closed */
const LINGER_MS_MAX = 2_000;

/**
 * How long a connection closed after a refusal that left the body unread (a 401, a 413, an unknown route) keeps
 * reading and dropping what the client still uploads: half the headers timeout, at most LINGER_MS_MAX. A stranger
 * could hold the connection as long by sending its headers slowly, so this adds no hold on the server it lacked.
 */
export function refusalLingerMs(limits: HttpLimits): number {
  return Math.min(LINGER_MS_MAX, Math.floor(Math.min(limits.headersTimeoutMs, limits.bodyTimeoutMs) / 2));
}

/**
 * Closes `socket` in stages once the response is written (RFC 9112 §9.6), instead of node's immediate close: first
 * its write side, then, after reading and dropping whatever the client still sends for at most `lingerMs` (or when the
 * client closes its side), the whole connection. Closed at once while the client was still uploading, the kernel
 * answers the upload with a reset that can erase the response before the client reads it: a client uploading a few
 * MB then sees a broken connection instead of the 401 or 413, and clients that retry connection errors (OpenAI's
 * SDKs do, twice) upload it again.
 */
export function lingerOnClose(socket: Socket, lingerMs: number): void {
  // node's server calls destroySoon after the last response on a connection: end, and destroy once the end is out
  socket.destroySoon = function lingeringClose(this: Socket) {
    if (this.destroyed) return;
    const timer = setTimeout(() => this.destroy(), lingerMs);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    this.once('end', () => this.destroy());
    this.end();
    this.resume();
  };
}
