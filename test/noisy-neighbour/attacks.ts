/**
 * What a hostile tenant or a stranger does to a server, each as a load that runs until stopped (the noisy-neighbour
 * suite measures another tenant's latency meanwhile). Each attack is bounded in connections and requests.
 */
import { Agent, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { postHead, rawConnect } from '../serving/raw-http.js';
import { keyFor, MODEL_ID } from '../serving/serve-helpers.js';

export interface AttackTarget {
  url: string;
  /** worker ports a stranger can reach in a multi-host deployment (host:port), none for a colocated server */
  workerPorts: string[];
}

export interface Attack {
  name: string;
  /** starts the attack; `stop` ends it and says what the attacker saw */
  start(target: AttackTarget, tenant: string): Promise<{ stop(): Promise<string> }>;
}

/**
 * Loops of one request per client until stopped, counting statuses; a refusal is retried after 10 ms. The body is
 * encoded once and written as it is (node:http, not fetch, which copies each body through a stream), as an attacker
 * replaying bytes would: the attacker shares the server's event loop in these tests, and its own costs are not the
 * server's.
 */
function requestLoop(target: AttackTarget, tenant: string, clients: number, request: unknown) {
  const body = Buffer.from(JSON.stringify(request));
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const send = () =>
    new Promise<number>((resolve) => {
      const req = httpRequest(`${target.url}/v1/completions`, {
        method: 'POST',
        agent,
        timeout: 60_000,
        headers: {
          'content-type': 'application/json',
          'content-length': body.length,
          authorization: `Bearer ${keyFor(tenant)}`,
        },
      });
      req.on('response', (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
        response.on('error', () => resolve(0));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(0));
      req.end(body);
    });
  const statuses = new Map<number, number>();
  let stopped = false;
  const loops = Array.from({ length: clients }, async () => {
    while (!stopped) {
      const status = await send();
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 10));
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      agent.destroy();
      return `statuses ${JSON.stringify([...statuses].sort())}`;
    },
  };
}

/** Opens `count` sockets, 50 at a time, each by `open` (a failed open is skipped); stop destroys them all. */
async function sockets(count: number, open: () => Promise<Socket>): Promise<{ stop(): Promise<string> }> {
  const held: Socket[] = [];
  for (let i = 0; i < count; i += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, count - i) }, () => open().catch(() => undefined)),
    );
    for (const s of batch) if (s !== undefined) held.push(s);
  }
  return {
    async stop() {
      const closedByServer = held.filter((s) => s.destroyed || s.readableEnded).length;
      for (const s of held) s.destroy();
      return `${held.length} connections opened, ${closedByServer} already closed by the server`;
    },
  };
}

function bareConnection(address: string): Promise<Socket> {
  const [host, port] = [
    address.slice(0, address.lastIndexOf(':')),
    Number(address.slice(address.lastIndexOf(':') + 1)),
  ];
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    socket.on('error', () => {});
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

export const ATTACKS: readonly Attack[] = [
  {
    name: 'slow unauthenticated bodies',
    async start(target) {
      let n = 0;
      return sockets(200, async () => {
        // spread over loopback addresses, as a botnet would be over sources
        const c = await rawConnect(target.url, `127.0.0.${2 + (n++ % 8)}`);
        c.socket.write(postHead('/v1/completions', 15 << 20));
        c.dribble('{', 500);
        return c.socket;
      });
    },
  },
  {
    name: 'huge prompts',
    async start(target, tenant) {
      const prompt = 'lorem ipsum dolor sit amet '.repeat(40_000); // ~1 MB
      return requestLoop(target, tenant, 4, { model: MODEL_ID, prompt, max_tokens: 4 });
    },
  },
  {
    name: 'one-letter prompts',
    async start(target, tenant) {
      const prompt = 'a'.repeat(256 * 1024);
      return requestLoop(target, tenant, 4, { model: MODEL_ID, prompt, max_tokens: 4 });
    },
  },
  {
    name: 'default-temperature floods with logprobs',
    async start(target, tenant) {
      return requestLoop(target, tenant, 12, {
        model: MODEL_ID,
        prompt: 'Tell me a long story about the sea',
        max_tokens: 96,
        ignore_eos: true,
        logprobs: 5,
      });
    },
  },
  {
    name: 'unread streams',
    async start(target, tenant) {
      const body = JSON.stringify({
        model: MODEL_ID,
        prompt: 'Count to a thousand',
        max_tokens: 200,
        ignore_eos: true,
        stream: true,
      });
      return sockets(20, async () => {
        const c = await rawConnect(target.url);
        c.socket.write(postHead('/v1/completions', Buffer.byteLength(body), `Bearer ${keyFor(tenant)}`) + body);
        c.socket.pause(); // never reads: the server's writes back up
        return c.socket;
      });
    },
  },
  {
    name: 'pre-authentication connection floods',
    async start(target) {
      const addresses = [new URL(target.url).host, ...target.workerPorts];
      let n = 0;
      return sockets(2000, () => bareConnection(addresses[n++ % addresses.length]!));
    },
  },
];
