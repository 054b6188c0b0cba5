/** Raw TCP clients for the front-door tests: what a slow or hostile client does, which fetch cannot. */
import { connect, type Socket } from 'node:net';

export interface RawConnection {
  socket: Socket;
  /** everything the server sent so far */
  received(): string;
  /** ms from connect to the first byte from the server (undefined: none yet) */
  firstByteMs(): number | undefined;
  /** resolves with the ms from connect to the close (the server's or ours), at most `timeoutMs` (then rejects) */
  closed(timeoutMs: number): Promise<number>;
  /** writes `chunk` every `everyMs` until the connection closes */
  dribble(chunk: string, everyMs: number): void;
}

/**
 * A TCP connection to the server at `url`, from `localAddress` (127.0.0.x are all loopback on Linux). `allowHalfOpen`:
 * it keeps its side open (and sending) after the server closes its own, as a hostile client may.
 */
export async function rawConnect(
  url: string,
  localAddress = '127.0.0.1',
  options: { allowHalfOpen?: boolean } = {},
): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const started = performance.now();
  const socket = connect({ host: hostname, port: Number(port), localAddress, allowHalfOpen: options.allowHalfOpen });
  let text = '';
  let firstByte: number | undefined;
  let closedAt: number | undefined;
  const closeWaiters: (() => void)[] = [];
  socket.on('data', (chunk: Buffer) => {
    firstByte ??= performance.now() - started;
    text += chunk.toString('latin1');
  });
  socket.on('error', () => {}); // a reset is one way the server closes; `closed` reports it
  socket.on('close', () => {
    closedAt = performance.now() - started;
    for (const w of closeWaiters.splice(0)) w();
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return {
    socket,
    received: () => text,
    firstByteMs: () => firstByte,
    closed(timeoutMs) {
      if (closedAt !== undefined) return Promise.resolve(closedAt);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`still open after ${timeoutMs} ms`)), timeoutMs);
        closeWaiters.push(() => {
          clearTimeout(timer);
          resolve(closedAt!);
        });
      });
    },
    dribble(chunk, everyMs) {
      const timer = setInterval(() => {
        if (socket.destroyed || !socket.writable) clearInterval(timer);
        else socket.write(chunk);
      }, everyMs);
      socket.once('close', () => clearInterval(timer));
    },
  };
}

/** The status code of the first response in `text` (undefined: none). */
export function statusOf(text: string): number | undefined {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return m === null ? undefined : Number(m[1]);
}

/** The JSON body of the one response in `text`. */
export function bodyOf(text: string): unknown {
  return JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
}

/** Request head for a POST of `length` bytes to `path`, with `authorization` when given. */
export function postHead(path: string, length: number, authorization?: string): string {
  return (
    `POST ${path} HTTP/1.1\r\nhost: kvfence\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n` +
    (authorization !== undefined ? `authorization: ${authorization}\r\n` : '') +
    '\r\n'
  );
}
