/**
 * The TCP transport (node:net). A socket becomes a ByteStream; the handshake and sealed framing are the shared ones.
 * Nagle is off (frames are written whole, corked); connects and handshakes have timeouts; the listener takes at most
 * LIMITS.transferConnectionsMax connections.
 */
import { createConnection, createServer, type Socket } from 'node:net';
import { TransferError } from '../transfer/transfer-error.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream, ByteStreamHandlers } from './byte-stream.js';
import type { FrameChannel } from './frame-channel.js';
import { authenticate } from './peer-auth.js';
import type { TransferListener, TransferTransport, TransportOptions } from './transport.js';

/** A connected socket as a ByteStream. Data that arrives before an owner is set waits in the paused socket. */
export function socketByteStream(socket: Socket): ByteStream {
  let handlers: ByteStreamHandlers | undefined;
  let lastError: Error | undefined;
  let closed = false;
  socket.setNoDelay(true);
  socket.pause();
  socket.on('error', (error) => {
    lastError = error;
  });
  socket.on('close', () => {
    closed = true;
    handlers?.close(lastError === undefined ? undefined : new TransferError('connection_closed', lastError.message));
  });
  socket.on('drain', () => handlers?.drain());
  socket.on('data', (chunk: Buffer) => handlers?.data(chunk));
  return {
    get closed() {
      return closed || socket.destroyed;
    },
    setHandlers(h) {
      handlers = h;
      socket.resume();
    },
    write(chunks) {
      if (socket.destroyed || socket.writableEnded) return false;
      socket.cork();
      let ok = true;
      for (const c of chunks) ok = socket.write(c);
      socket.uncork();
      return ok;
    },
    end() {
      socket.end();
    },
    destroy(error) {
      if (error !== undefined) lastError = error;
      socket.destroy();
    },
  };
}

function parseAddress(address: string): { host: string; port: number } {
  const at = address.lastIndexOf(':');
  const port = Number(address.slice(at + 1));
  if (at < 1 || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TransferError('connection_closed', `bad address ${address} (want host:port)`);
  }
  return { host: address.slice(0, at), port };
}

export class TcpTransport implements TransferTransport {
  readonly name = 'tcp';

  constructor(private readonly options: TransportOptions) {}

  listen(address: string, onChannel: (channel: FrameChannel) => void): Promise<TransferListener> {
    const { host, port } = parseAddress(address);
    const auth = { secret: this.options.secret, timeoutMs: this.options.handshakeTimeoutMs, clock: this.options.clock };
    const server = createServer({ allowHalfOpen: false }, (socket) => {
      authenticate(socketByteStream(socket), 'responder', auth).then(onChannel, (error: Error) =>
        this.options.onRefused?.(error),
      );
    });
    server.maxConnections = LIMITS.transferConnectionsMax;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        const bound = server.address();
        const actual = typeof bound === 'object' && bound !== null ? bound.port : port;
        resolve({
          address: `${host}:${actual}`,
          close: () => new Promise<void>((done) => server.close(() => done())),
        });
      });
    });
  }

  connect(address: string): Promise<FrameChannel> {
    const { host, port } = parseAddress(address);
    return new Promise<Socket>((resolve, reject) => {
      const socket = createConnection({ host, port, allowHalfOpen: false });
      const cancel = this.options.clock.after(this.options.handshakeTimeoutMs, () => {
        socket.destroy();
        reject(new TransferError('connection_closed', `no connection to ${address} in time`));
      });
      socket.once('connect', () => {
        cancel();
        resolve(socket);
      });
      socket.once('error', (error) => {
        cancel();
        reject(new TransferError('connection_closed', `connect to ${address}: ${error.message}`));
      });
    }).then((socket) => {
      const stream = socketByteStream(socket);
      const auth = {
        secret: this.options.secret,
        timeoutMs: this.options.handshakeTimeoutMs,
        clock: this.options.clock,
      };
      return authenticate(this.options.wrapConnectStream?.(stream) ?? stream, 'initiator', auth);
    });
  }
}
