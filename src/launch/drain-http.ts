/** The gateway half of a graceful shutdown, colocated or not: let the HTTP requests in flight end, within a deadline. */

/**
 * `closeHttp` (fastify's close: stops listening, closes idle connections, resolves once every request in flight has
 * ended) runs; after `deadlineMs`, `failRest` ends what is left (503) so the close can finish. Resolves once closed.
 */
export async function drainHttp(
  closeHttp: () => Promise<void>,
  failRest: () => Promise<void>,
  deadlineMs: number,
): Promise<void> {
  const closed = closeHttp();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, deadlineMs);
  });
  await Promise.race([closed, late]);
  clearTimeout(timer);
  await failRest();
  await closed;
}
