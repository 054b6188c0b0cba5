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
import type { IncomingMessage, ServerOptions } from 'node:http';
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

/** the longest a refused request's connection stays open, for its client to read the refusal */
const LINGER_MS_MAX = 2_000;
/**
 * The most a refused request's connection reads (and drops) after the refusal: what a client that sent a small
 * request still has in flight, so that its close is seen and the connection goes at once. Past it the connection
 * reads nothing more until it closes: read at full speed, a stranger's endless upload cost the server a core for the
 * whole linger, each time it connected again.
 */
export const LINGER_BYTES_MAX = 64 * 1024;

/**
 * How long a connection closed after a refusal that left the body unread (a 401, a 413, an unknown route) stays open
 * for its client to read the refusal: half the headers timeout, at most LINGER_MS_MAX. A stranger could hold the
 * connection as long by sending its headers slowly, so this adds no hold on the server it lacked.
 */
export function refusalLingerMs(limits: HttpLimits): number {
  return Math.min(LINGER_MS_MAX, Math.floor(Math.min(limits.headersTimeoutMs, limits.bodyTimeoutMs) / 2));
}

/** Connections a refusal is closing (lingerOnClose) */
const closing = new WeakSet<Socket>();

/**
 * True once a refusal is closing `socket`'s connection: a request pipelined behind it must not run (node parses it and
 * hands it on like any other, and its answer would be lost in the close).
 */
export function closesAfterRefusal(socket: Socket): boolean {
  return closing.has(socket);
}

/**
 * Closes the connection of `request`, refused, in stages once the response is written (RFC 9112 §9.6), instead of
 * node's immediate close: first its write side, then the whole connection when the client closes its side or after
 * `lingerMs`. Closed at once while the client was still uploading, the kernel answers the upload with a reset that can
 * erase the response before the client reads it: a client uploading a few MB then sees a broken connection instead
 * of the 401 or 413, and clients that retry connection errors (OpenAI's SDKs do, twice) upload it again.
 *
 * Of the refused body, at most LINGER_BYTES_MAX is read (and dropped); then nothing more is read, and an uploading
 * client waits on its own full buffers with the refusal in hand. Node would read all of it to drop it, as fast as
 * the client sends, for the whole linger. A reset after `lingerMs` comes once the client has read the refusal (one
 * that reads only after sending all still finds it: a write error first, then the answer).
 */
export function lingerOnClose(request: IncomingMessage, lingerMs: number): void {
  const socket = request.socket;
  // a later refusal on the same connection (pipelined requests): the first one's linger stands
  if (closing.has(socket)) return;
  closing.add(socket);
  // a listener of its own keeps node from dumping the body once the response is written (it reads a body nobody
  // consumes, at any speed); pausing the request past the bound stops the socket's reads (backpressure)
  let dropped = 0;
  request.on('data', (chunk: Buffer) => {
    dropped += chunk.byteLength;
    if (dropped > LINGER_BYTES_MAX) request.pause();
  });
  let lingering = false;
  // node's server calls destroySoon after the last response on a connection: end, and destroy once the end is out
  socket.destroySoon = function lingeringClose(this: Socket) {
    if (this.destroyed || lingering) return;
    lingering = true;
    const timer = setTimeout(() => this.destroy(), lingerMs);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    this.once('end', () => this.destroy());
    this.end();
  };
}
