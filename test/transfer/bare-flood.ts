/**
 * A flood of bare TCP connections (connect, then say nothing) at a worker port, for the pre-authentication tests
 * (test/transfer/pre-auth.test.ts, test/disagg/pre-auth-flood.test.ts): how long the server let each one live.
 *
 * Connections go out in waves of WAVE, each once the last one has connected: far above the pre-auth cap at any time,
 * but never more at once than the kernel's accept queue (511 by default) holds. Beyond it the kernel leaves a
 * connection half-open without the server ever seeing it, and the client would wait on it for good; that is the
 * kernel's SYN-flood concern, not the server's.
 */
import { connect } from 'node:net';

const WAVE = 200;

export interface Bare {
  /** ms from connect to the server's close, per connection, once closed */
  readonly livedMs: number[];
  readonly allClosed: Promise<void>;
}

/** Resolves once connected (or failed to) with `closed`: when the server closed it (never, for a failed one). */
function bareConnection(host: string, port: number, livedMs: number[]): Promise<{ closed: Promise<void> }> {
  const socket = connect({ host, port });
  socket.on('error', () => {});
  return new Promise((connected) => {
    socket.once('connect', () => {
      const t0 = performance.now();
      const closed = new Promise<void>((done) =>
        socket.once('close', () => {
          livedMs.push(performance.now() - t0);
          done();
        }),
      );
      connected({ closed });
    });
    socket.once('close', () => connected({ closed: Promise.resolve() }));
  });
}

/** `count` TCP connections that never send a byte; resolves once each has connected (or failed to). */
export async function bareFlood(address: string, count: number): Promise<Bare> {
  const [host, port] = address.split(':') as [string, string];
  const livedMs: number[] = [];
  const closings: Promise<void>[] = [];
  for (let sent = 0; sent < count; sent += WAVE) {
    const wave = Array.from({ length: Math.min(WAVE, count - sent) }, () =>
      bareConnection(host, Number(port), livedMs),
    );
    for (const c of await Promise.all(wave)) closings.push(c.closed);
  }
  return { livedMs, allClosed: Promise.all(closings).then(() => {}) };
}
