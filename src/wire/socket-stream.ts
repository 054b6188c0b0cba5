/**
 * A node socket as a ByteStream, reading into one buffer reused read after read (net's `onread`) wherever node lets
 * it: sockets this process connects take `onread` when made; accepted ones are rewrapped (below). node otherwise
 * gives every read a fresh 64 KiB buffer: at a KV transfer's pace, that is most of the receiving side's garbage
 * collection and page faults (docs/protocol.md §8).
 */
import { closeSync } from 'node:fs';
import { type OnReadOpts, Socket, type SocketConstructorOpts } from 'node:net';
import { sharedAddon } from '../compute/native-backend.js';
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import type { ByteStream, ByteStreamHandlers } from './byte-stream.js';

/**
 * The buffer every socket of this thread reads into (node reads at most 64 KiB at a time). One serves them all: a
 * read is delivered to its handler synchronously, before the event loop reads anything else, and is lent for that
 * call only (ByteStreamHandlers.data). A module is per thread, so each worker thread has its own.
 */
const READ_BUFFER = new Uint8Array(64 * 1024);

/** Where a socket's reads into READ_BUFFER go (net's `onread`): set before the socket is first resumed. */
export class ReusedReads {
  to: ((bytes: Uint8Array) => void) | undefined;
  readonly onread = {
    buffer: READ_BUFFER,
    callback: (count: number): boolean => {
      // a socket reads only once resumed, and its stream sets `to` before that: a read with nowhere to go is a bug
      assert(this.to !== undefined, 'a socket read before its reads had somewhere to go');
      this.to(READ_BUFFER.subarray(0, count));
      return true;
    },
  };
}

/**
 * An accepted socket (paused: the server's `pauseOnConnect`) rewrapped, paused too, to read through `reads`: node takes
 * `onread` only in the constructor of a socket, and the server makes the accepted ones. A second descriptor for the
 * connection (the addon's dup of the one node's handle holds, `_handle.fd`: node's, not documented, there on every
 * POSIX node) goes into a socket made here, and the accepted one is closed, which closes its descriptor and nothing
 * else: no byte on the wire. Without the addon, or where the descriptor cannot be had or copied, the accepted socket
 * stays as it is, and its reads come in node's fresh buffers.
 */
export function rewrapAccepted(accepted: Socket, reads: ReusedReads, addon = sharedAddon()): Socket {
  const fd = (accepted as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (addon === null || typeof fd !== 'number' || fd < 0) return accepted;
  let copy: number;
  try {
    copy = addon.dupFd(fd);
  } catch {
    return accepted;
  }
  // the constructor takes `onread` (net.connect hands it its options; documented for it since 2024), where
  // @types/node's type of its options does not yet
  const options: SocketConstructorOpts & { onread: OnReadOpts } = {
    fd: copy,
    readable: true,
    writable: true,
    allowHalfOpen: false,
    onread: reads.onread,
  };
  let socket: Socket;
  try {
    socket = new Socket(options);
  } catch {
    closeSync(copy);
    return accepted;
  }
  socket.pause(); // made reading; paused as the accepted one was, until its stream has an owner
  accepted.destroy(); // closes its descriptor only: the connection lives on in the copy
  return socket;
}

/**
 * A connected socket as a ByteStream. Data that arrives before an owner is set waits in the paused socket. Reads come
 * through `reads` where the socket was made with its `onread`, else as node's 'data' events.
 */
export function socketByteStream(socket: Socket, reads?: ReusedReads): ByteStream {
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
  if (reads !== undefined) reads.to = (bytes) => handlers?.data(bytes);
  return {
    get closed() {
      return closed || socket.destroyed;
    },
    setHandlers(h) {
      handlers = h;
      socket.resume();
    },
    write(chunks, released) {
      if (socket.destroyed || socket.writableEnded) return false;
      socket.cork();
      let ok = true;
      // A socket's write callbacks run in order, once libuv has finished each write: the last one's says that node
      // holds none of the chunks any more. Nothing is handed back on an error, nor from a destroyed socket (node
      // calls back a write it dropped at destroy without an error).
      const written =
        released &&
        ((error?: Error | null) => {
          if (error == null && !socket.destroyed) released();
        });
      const last = chunks.length - 1;
      chunks.forEach((c, i) => {
        ok = socket.write(c, i === last ? written : undefined);
      });
      socket.uncork();
      if (chunks.length === 0) released?.();
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
