/** The gateway half of a graceful shutdown, colocated or not: let the HTTP requests in flight end, within a deadline. */

/**
 * Once the requests in flight have ended, how long the connections left get to finish (a 503's last bytes, a
 * refusal's staged close) before they are cut.
 */
export const CONNECTIONS_GRACE_MS = 1_000;

/**
 * `closeHttp` (fastify's close: stops listening, closes idle connections, resolves once every request in flight has
 * ended) runs; after `deadlineMs`, `failRest` ends what is left (503), and after CONNECTIONS_GRACE_MS more
 * `cutConnections` closes every connection still open, so the close finishes. Resolves once closed.
 */
export async function drainHttp(
  closeHttp: () => Promise<void>,
  failRest: () => Promise<void>,
  cutConnections: () => void,
  deadlineMs: number,
): Promise<void> {
  const closed = closeHttp();
  await within(closed, deadlineMs);
  await failRest();
  await closeHttpCutting(closed, cutConnections);
}

/**
 * Waits for `closed` (an HTTP close under way) at most CONNECTIONS_GRACE_MS, then cuts the connections still open.
 * Node stops enforcing its headers and body timeouts once its server closes, so a connection that never finishes its
 * request (a stranger's half-sent head, a body that never ends) held the close, and with it SIGTERM, for ever.
 */
export async function closeHttpCutting(closed: Promise<void>, cutConnections: () => void): Promise<void> {
  await within(closed, CONNECTIONS_GRACE_MS);
  cutConnections();
  await closed;
}

async function within(done: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  await Promise.race([done, late]);
  clearTimeout(timer);
}
