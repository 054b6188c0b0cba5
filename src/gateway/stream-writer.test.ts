/**
 * StreamWriter over real TCP: an HTTP server streams chunks as fast as it can to a raw client. Loopback TCP absorbs
 * about 4 MiB per connection in kernel buffers before `write` returns false, so these tests write a few MiB first;
 * what they check is what the server itself holds past that point, and how the connection ends.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { type StreamBounds, type StreamCut, StreamWriter } from './stream-writer.js';

const CHUNK = `data: ${'x'.repeat(1500)}\n\n`;
/** far more than loopback's kernel buffers take, so a client that does not read is noticed */
const STREAM_BYTES = 24 * 1024 * 1024;

interface Served {
  cut: StreamCut | undefined;
  /** the most bytes the server held for the stream, seen before each write */
  peakBuffered: number;
  written: number;
  ended: boolean;
  /** the server's end of the connection */
  socket: Socket;
}

/**
 * One streamed response per connection: `bytes` of chunks, then end. Chunks go out one per event-loop turn; `paced`:
 * once the socket is over its high-water mark, one every 2 ms instead, like tokens that keep coming at the model's rate.
 */
function streamingServer(
  bounds: StreamBounds,
  bytes: number,
  paced: boolean,
): { server: Server; served: Promise<Served> } {
  let resolve: (s: Served) => void = () => {};
  const served = new Promise<Served>((r) => {
    resolve = r;
  });
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const s: Served = { cut: undefined, peakBuffered: 0, written: 0, ended: false, socket: res.socket as Socket };
    const writer = new StreamWriter(res, bounds, (cut) => {
      s.cut = cut;
      resolve(s);
    });
    const pump = () => {
      if (s.cut !== undefined) return;
      if (s.written >= bytes) {
        writer.end('data: [DONE]\n\n');
        s.ended = true;
        res.once('close', () => resolve(s));
        return;
      }
      s.peakBuffered = Math.max(s.peakBuffered, res.writableLength);
      writer.write(CHUNK);
      s.written += CHUNK.length;
      if (paced && res.writableNeedDrain) setTimeout(pump, 2);
      else setImmediate(pump);
    };
    pump();
  });
  return { server, served };
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

/** A raw client that sends one request and reads nothing (its socket is paused). */
function unreadClient(port: number): Socket {
  const socket = connect(port, '127.0.0.1');
  socket.pause();
  socket.write('GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n');
  return socket;
}

/**
 * Reads what is left until the connection closes. After a reset, that is only what was already in the client's own
 * receive buffer: the server's kernel dropped the rest (a plain close would have delivered all of it first).
 */
function readRest(socket: Socket): Promise<{ bytes: number; done: boolean }> {
  return new Promise((resolve) => {
    let bytes = 0;
    let done = false;
    socket.on('data', (b: Buffer) => {
      bytes += b.length;
      done ||= b.includes('[DONE]');
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve({ bytes, done }));
    socket.resume();
  });
}

describe('StreamWriter', { timeout: 30_000 }, () => {
  const servers: Server[] = [];
  after(() => {
    for (const s of servers) s.close();
  });

  it('cuts a stream whose client reads nothing once the server holds more than its bound, and resets it', async () => {
    const bounds = { bufferedBytesMax: 32 * 1024, drainTimeoutMs: 60_000 };
    const { server, served } = streamingServer(bounds, STREAM_BYTES, true);
    servers.push(server);
    const client = unreadClient(await listen(server));
    const s = await served;
    assert.equal(s.cut?.reason, 'buffer_full');
    assert.ok(s.cut.bufferedBytes > bounds.bufferedBytesMax);
    // checked before each write: never more than the bound, the first chunk and one more chunk
    assert.ok(s.peakBuffered <= bounds.bufferedBytesMax + 2 * CHUNK.length, `peak ${s.peakBuffered}`);
    assert.ok(s.written < STREAM_BYTES, 'the stream stopped before its end');
    assert.equal(s.ended, false);
    assert.equal(s.socket.destroyed, true);
    const rest = await readRest(client);
    assert.ok(rest.bytes < s.written / 2, `a reset drops what was unread: ${rest.bytes} of ${s.written} bytes arrive`);
    assert.equal(rest.done, false);
  });

  it('cuts a stream that stays over its high-water mark past the drain deadline', async () => {
    const bounds = { bufferedBytesMax: 1 << 30, drainTimeoutMs: 200 };
    const { server, served } = streamingServer(bounds, STREAM_BYTES, true);
    servers.push(server);
    const client = unreadClient(await listen(server));
    const started = performance.now();
    const s = await served;
    assert.equal(s.cut?.reason, 'not_draining');
    assert.ok(s.written < STREAM_BYTES);
    assert.ok(performance.now() - started < 10_000);
    const rest = await readRest(client);
    assert.ok(rest.bytes < s.written / 2, `${rest.bytes} of ${s.written}`);
  });

  it('does not cut a client that reads slowly but drains within the deadline', async () => {
    // between two bursts the server fills the socket's high-water mark at once (16 KiB on node 20, 64 KiB from node
    // 22), then writes a chunk every 2 ms, ~225 KB a 300 ms pause: the byte bound leaves room for both
    const bounds = { bufferedBytesMax: 512 * 1024, drainTimeoutMs: 500 };
    // 10 MiB: past the kernel's share, so the server's own buffer and drain events come into play, several times
    const { server, served } = streamingServer(bounds, 10 * 1024 * 1024, true);
    servers.push(server);
    const client = unreadClient(await listen(server));
    let received = 0;
    const started = performance.now();
    // reads in short bursts, pausing 300 ms each time (the deadline is 500 ms) while the server keeps writing: the
    // stream outlasts one deadline, so it survives only if each drain restarts the clock
    const reader = setInterval(() => {
      client.resume();
      setTimeout(() => client.pause(), 3);
    }, 300);
    client.on('data', (b: Buffer) => {
      received += b.length;
    });
    const s = await served;
    clearInterval(reader);
    assert.equal(s.cut, undefined);
    client.resume();
    await new Promise((r) => client.once('end', r));
    client.destroy();
    assert.equal(s.ended, true);
    assert.ok(performance.now() - started > bounds.drainTimeoutMs, 'the stream lasted longer than one deadline');
    assert.ok(
      s.peakBuffered > s.socket.writableHighWaterMark,
      `the server held more than its high-water mark (${s.peakBuffered} bytes) and saw it drain in time`,
    );
    assert.ok(received > s.written, `all ${s.written} bytes arrive (with headers): ${received}`);
  });

  it('resets a finished stream whose last bytes are never read, after the deadline', async () => {
    const bounds = { bufferedBytesMax: 1 << 30, drainTimeoutMs: 1_000 };
    // a response that ends while the server still holds bytes for it (past the kernel's ~4 MiB)
    const { server, served } = streamingServer(bounds, 6 * 1024 * 1024, false);
    servers.push(server);
    const client = unreadClient(await listen(server));
    const s = await served;
    assert.equal(s.ended, true);
    assert.equal(s.cut?.reason, 'not_draining');
    assert.equal(s.socket.destroyed, true);
    const rest = await readRest(client);
    assert.ok(rest.bytes < s.written / 2, `${rest.bytes} of ${s.written}`);
  });
});
