/**
 * The TCP transport (node:net). A socket becomes a ByteStream; the handshake and sealed framing are the shared ones.
 * Nagle is off (frames are written whole, corked).
 *
 * Listening: connections still in the handshake and authenticated ones have separate caps (connection-gate.ts), and
 * an unauthenticated connection gets at most LIMITS.preAuthTimeoutMsMax, so a flood of bare connections to a worker
 * port costs a bounded amount and leaves real peers their slots.
 *
 * Connecting: within `handshakeTimeoutMs` in all, tries again (short backoff) when the connection is refused, closed or
 * slow before the handshake completes — what a listener dropping old unauthenticated connections under a flood looks
 * like from a real peer. A peer that fails the proof is not tried again. Out of time: worker_unavailable (a 503 for
 * the client, the peer could not be reached), never auth_failed.
 */
import { createConnection, createServer, type Socket } from 'node:net';
import { TransferError } from '../transfer/transfer-error.js';
import { errorMessage, KvfenceError, listenFailure } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { ConnectionGate } from './connection-gate.js';
import type { FrameChannel } from './frame-channel.js';
import { authenticate } from './peer-auth.js';
import { ReusedReads, rewrapAccepted, socketByteStream } from './socket-stream.js';
import type { TransferListener, TransferTransport, TransportOptions } from './transport.js';

function parseAddress(address: string): { host: string; port: number } {
  const at = address.lastIndexOf(':');
  const port = Number(address.slice(at + 1));
  if (at < 1 || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TransferError('connection_closed', `bad address ${address} (want host:port)`);
  }
  return { host: address.slice(0, at), port };
}

const RETRY_DELAY_MS_MIN = 10;
const RETRY_DELAY_MS_MAX = 200;

export class TcpTransport implements TransferTransport {
  readonly name = 'tcp';

  constructor(private readonly options: TransportOptions) {}

  listen(address: string, onChannel: (channel: FrameChannel) => void): Promise<TransferListener> {
    const { host, port } = parseAddress(address);
    const { secret, clock, handshakeTimeoutMs, aead } = this.options;
    const auth = { secret, clock, aead, timeoutMs: Math.min(handshakeTimeoutMs, LIMITS.preAuthTimeoutMsMax) };
    const gate = new ConnectionGate({
      preAuthMax: LIMITS.preAuthConnectionsMax,
      authenticatedMax: LIMITS.transferConnectionsMax,
    });
    // the connections this listener took, open: node's server no longer counts those rewrapped (socket-stream.ts)
    const open = new Set<Socket>();
    const server = createServer({ allowHalfOpen: false, pauseOnConnect: true }, (accepted) => {
      const reads = new ReusedReads();
      const socket = rewrapAccepted(accepted, reads);
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      gate.admit(socket);
      authenticate(socketByteStream(socket, reads), 'responder', auth).then(
        (channel) => {
          if (gate.promote(socket)) onChannel(channel);
          else
            channel.destroy(new TransferError('receiver_closed', 'this port takes no more authenticated connections'));
        },
        (error: Error) => this.options.onRefused?.(error),
      );
    });
    return new Promise((resolve, reject) => {
      server.once('error', (error) => reject(listenFailure(error, address)));
      server.listen(port, host, () => {
        const bound = server.address();
        const actual = typeof bound === 'object' && bound !== null ? bound.port : port;
        resolve({
          address: `${host}:${actual}`,
          // stops accepting, then waits for the connections it took to close (their owners close them)
          close: async () => {
            await new Promise<void>((done) => server.close(() => done()));
            await Promise.all([...open].map((s) => new Promise((closed) => s.once('close', closed))));
          },
        });
      });
    });
  }

  async connect(address: string): Promise<FrameChannel> {
    const { host, port } = parseAddress(address);
    const { clock, handshakeTimeoutMs } = this.options;
    const deadline = clock.nowMs() + handshakeTimeoutMs;
    let tries = 0;
    let last = '';
    for (let left = handshakeTimeoutMs; left > 0; left = deadline - clock.nowMs()) {
      tries++;
      try {
        return await this.connectOnce(host, port, left);
      } catch (error) {
        if (error instanceof TransferError && error.reason === 'auth_failed') throw error;
        last = errorMessage(error);
      }
      const pause = Math.min(RETRY_DELAY_MS_MAX, RETRY_DELAY_MS_MIN * 2 ** (tries - 1), deadline - clock.nowMs());
      if (pause > 0) await new Promise<void>((resolve) => clock.after(pause, resolve));
    }
    throw new KvfenceError(
      'worker_unavailable',
      `the worker took no authenticated connection within ${handshakeTimeoutMs} ms (${tries} tries; last: ${last})`,
    );
  }

  /** One TCP connect and handshake within `timeoutMs`; errors name no address (they may reach a client). */
  private connectOnce(host: string, port: number, timeoutMs: number): Promise<FrameChannel> {
    const deadline = this.options.clock.nowMs() + timeoutMs;
    const reads = new ReusedReads();
    return new Promise<Socket>((resolve, reject) => {
      const socket = createConnection({ host, port, allowHalfOpen: false, onread: reads.onread });
      const cancel = this.options.clock.after(timeoutMs, () => {
        socket.destroy();
        reject(new TransferError('connection_closed', 'no TCP connection in time'));
      });
      socket.once('connect', () => {
        cancel();
        resolve(socket);
      });
      socket.once('error', (error: NodeJS.ErrnoException) => {
        cancel();
        reject(new TransferError('connection_closed', `connect: ${error.code ?? 'error'}`));
      });
    }).then((socket) => {
      const stream = socketByteStream(socket, reads);
      const auth = {
        secret: this.options.secret,
        timeoutMs: Math.max(1, deadline - this.options.clock.nowMs()),
        clock: this.options.clock,
        aead: this.options.aead,
      };
      return authenticate(this.options.wrapConnectStream?.(stream) ?? stream, 'initiator', auth);
    });
  }
}
