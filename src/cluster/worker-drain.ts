/**
 * A worker's side of a graceful shutdown (SIGTERM): every connected gateway hears `draining` and routes nothing new
 * here; the control listener stops taking connections; each gateway closes its connection once it has nothing left
 * here (all its requests' ends arrived), and when none is left — or at the deadline, when the rest are cut and their
 * requests fail honestly (503 at the gateway) — the worker may close.
 */
import type { LogSink } from '../util/log.js';
import type { ControlConnection } from './control-channel.js';

export async function drainControl(
  connections: ReadonlySet<ControlConnection>,
  /** stops accepting connections; resolves once every accepted one has ended */
  closeListener: () => Promise<void>,
  deadlineMs: number,
  log: LogSink,
): Promise<void> {
  for (const conn of connections) conn.send({ type: 'draining' });
  log.info({ gateways: connections.size, deadlineMs }, 'draining: serving what this worker holds, taking nothing new');
  const closed = closeListener();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), deadlineMs);
  });
  const outcome = await Promise.race([closed.then(() => 'drained' as const), late]);
  clearTimeout(timer);
  if (outcome === 'late') {
    log.warn({ gateways: connections.size, deadlineMs }, 'drain deadline passed; cutting the connections left');
    for (const conn of [...connections]) conn.close('the drain deadline passed');
  } else log.info({}, 'drained: no gateway holds anything here');
  await closed;
}
