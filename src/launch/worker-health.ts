/**
 * A worker's health endpoints for an orchestrator (`--health-listen`): workers speak no HTTP otherwise.
 *   /health/live   200 while the process runs its event loop (liveness: restart it only when this fails)
 *   /health/ready  200 while it takes new requests; 503 while it starts (the listener opens before the model loads, so
 *                  a bad --health-listen fails the start at once) and from the moment it drains (readiness: a
 *                  Kubernetes headless Service drops a pod that is not ready from DNS, so gateways that find workers
 *                  by DNS retire it too)
 * Plain node:http, GET only, tiny answers, short timeouts and connection caps: it is reachable from the pod network,
 * so a stranger who opens connections and sends nothing must not crowd out the kubelet's probes (a failed readiness
 * probe takes the worker out of service, failed liveness probes restart it). A probe sends its request as soon as it
 * connects and gets its answer at once, so: a connection may wait HEALTH_IDLE_MS for its request; at most
 * SILENT_MAX connections wait at once, and a new one evicts the one waiting longest (a flood evicts itself, never a
 * probe that has sent its request); every answer closes its connection.
 */
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { KvfenceError, listenFailure } from '../util/errors.js';

export interface WorkerHealth {
  address: string;
  close(): Promise<void>;
}

const CONNECTIONS_MAX = 1_024;
const SILENT_MAX = 32;
/** how long a connection may wait without sending its request */
export const HEALTH_IDLE_MS = 1_000;
const TIMEOUT_MS = 5_000;

/** Where a worker process is: what /health/ready says, and what its signals do (worker-lifecycle.ts). */
export type WorkerPhase = 'starting' | 'ready' | 'draining';

export function serveWorkerHealth(listen: string, phase: () => WorkerPhase): Promise<WorkerHealth> {
  const at = listen.lastIndexOf(':');
  const port = Number(listen.slice(at + 1));
  if (at < 1 || !Number.isInteger(port) || port < 0 || port > 65535)
    throw new KvfenceError('invalid_argument', `--health-listen: "${listen}" is not host:port`);
  const host = listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  /** connections that have not sent their request yet, the longest waiting first */
  const silent = new Set<Socket>();
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? '').split('?')[0];
    silent.delete(request.socket);
    const answer = (status: number, body: object) => {
      response.writeHead(status, {
        'content-type': 'application/json',
        'cache-control': 'no-store',
        connection: 'close',
      });
      response.end(JSON.stringify(body));
    };
    if (request.method !== 'GET') answer(405, { status: 'method_not_allowed' });
    else if (path === '/health/live') answer(200, { status: 'live' });
    else if (path === '/health/ready') {
      const now = phase();
      if (now === 'ready') answer(200, { status: 'ready' });
      else answer(503, { status: 'not_ready', [now]: true });
    } else answer(404, { status: 'not_found' });
  });
  server.maxConnections = CONNECTIONS_MAX;
  server.headersTimeout = TIMEOUT_MS;
  server.requestTimeout = TIMEOUT_MS;
  server.keepAliveTimeout = HEALTH_IDLE_MS;
  server.on('connection', (socket: Socket) => {
    if (silent.size >= SILENT_MAX) {
      const oldest = silent.values().next().value as Socket;
      silent.delete(oldest);
      oldest.destroy();
    }
    silent.add(socket);
    socket.once('close', () => silent.delete(socket));
    // node checks its headers timeout only every few seconds: a silent connection is cut off here, on time
    socket.setTimeout(HEALTH_IDLE_MS, () => socket.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', (error) => reject(listenFailure(error, listen)));
    server.listen(port, host, () => {
      const bound = server.address();
      const actual = typeof bound === 'object' && bound !== null ? bound.port : port;
      resolve({
        address: `${listen.slice(0, at)}:${actual}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
