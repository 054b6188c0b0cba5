/**
 * Where the gateway finds its workers: a fixed address list (`--prefill a:1,b:2`), or a DNS name (`--prefill-dns
 * kvfence-prefill:7101`) that resolves to every ready pod of a Kubernetes headless Service. The gateway re-asks each
 * role's resolver every `refreshMs`: an address that appears gets a link (the dispatcher checks its hello like any
 * other), one that disappears is retired — drained, never cut: its requests run to their end first.
 *
 * A failed or empty answer changes nothing: a DNS hiccup, or a moment with no ready pod, must not retire every worker
 * at once (a worker that is really gone is already down, and routing skips it).
 */
import { lookup } from 'node:dns/promises';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { LogSink } from '../util/log.js';
import type { WorkerRole } from './control-protocol.js';

export interface WorkerResolver {
  /** what the operator gave (for logs) */
  readonly source: string;
  /** whether answers may change (DNS), so asking again is worth it */
  readonly dynamic: boolean;
  /** the workers' control addresses now, host:port */
  resolve(): Promise<string[]>;
}

/** The addresses as given, forever. */
export function staticResolver(addresses: readonly string[]): WorkerResolver {
  return { source: addresses.join(','), dynamic: false, resolve: async () => [...addresses] };
}

/** Looks up every address of a name (the system resolver: search domains and /etc/hosts apply), same port for each. */
export type AddressLookup = (host: string) => Promise<string[]>;

const systemLookup: AddressLookup = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** `name:port` → every address the name resolves to, with that port, sorted (`::1:7101`: the port is after the last colon). */
export function dnsResolver(nameAndPort: string, look: AddressLookup = systemLookup): WorkerResolver {
  const m = /^([A-Za-z0-9.-]{1,253}):(\d{1,5})$/.exec(nameAndPort);
  const port = Number(m?.[2]);
  if (m === null || port < 1 || port > 65535)
    throw new KvfenceError('invalid_argument', `"${nameAndPort}" is not name:port (a DNS name and a port)`);
  const host = m[1]!;
  return {
    source: nameAndPort,
    dynamic: true,
    resolve: async () => {
      const addresses = await look(host);
      return [...new Set(addresses)].sort().map((a) => `${a}:${port}`);
    },
  };
}

/** What discovery changes: the dispatcher's worker set. */
export interface WorkerSet {
  addresses(role: WorkerRole): string[];
  addWorker(role: WorkerRole, address: string): boolean;
  retireWorker(address: string): void;
}

export interface WorkerDiscoveryOptions {
  resolvers: Record<WorkerRole, WorkerResolver>;
  refreshMs: number;
  /** one resolution longer than this is given up for this round */
  resolveTimeoutMs: number;
  log: LogSink;
}

const ROLES: readonly WorkerRole[] = ['prefill', 'decode'];

export class WorkerDiscovery {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly options: WorkerDiscoveryOptions) {}

  /**
   * The first answer of both roles, each with at least one address, asked again every refreshMs until `timeoutMs`
   * (workers may come up after the gateway); throws with the last reason after that.
   */
  async initial(timeoutMs: number): Promise<Record<WorkerRole, string[]>> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const answers = await Promise.all(ROLES.map((role) => this.ask(role)));
      const missing = ROLES.filter((_, i) => answers[i]!.length === 0);
      if (missing.length === 0) return { prefill: answers[0]!, decode: answers[1]! };
      const fixed = missing.some((role) => !this.options.resolvers[role].dynamic); // an empty list stays empty
      if (fixed || Date.now() + this.options.refreshMs > until)
        throw new KvfenceError(
          'worker_unavailable',
          `no ${missing.join(' or ')} worker found at ${missing.map((r) => this.options.resolvers[r].source).join(', ')} within ${timeoutMs} ms`,
        );
      await new Promise((resolve) => setTimeout(resolve, this.options.refreshMs));
    }
  }

  /** Re-resolves every refreshMs (one round at a time) and applies the differences to `workers`. */
  start(workers: WorkerSet): void {
    if (!ROLES.some((role) => this.options.resolvers[role].dynamic)) return; // fixed lists: nothing to ask again
    const round = async () => {
      for (const role of ROLES) {
        const now = await this.ask(role);
        if (this.stopped) return;
        if (now.length > 0) this.apply(workers, role, now);
      }
    };
    const schedule = () => {
      if (this.stopped) return;
      this.timer = setTimeout(() => void round().finally(schedule), this.options.refreshMs);
    };
    schedule();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
  }

  /** One role's addresses now (at most the worker bound); [] when the resolver failed or was late. */
  private async ask(role: WorkerRole): Promise<string[]> {
    const resolver = this.options.resolvers[role];
    let timer: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${this.options.resolveTimeoutMs} ms`)),
          this.options.resolveTimeoutMs,
        );
      });
      const answer = await Promise.race([resolver.resolve(), late]);
      if (answer.length > LIMITS.workerCountMax)
        this.options.log.warn({ role, found: answer.length, max: LIMITS.workerCountMax }, 'too many workers found');
      return answer.slice(0, LIMITS.workerCountMax);
    } catch (error) {
      this.options.log.warn({ role, source: resolver.source, err: errorMessage(error) }, 'worker lookup failed');
      return [];
    } finally {
      clearTimeout(timer);
    }
  }

  private apply(workers: WorkerSet, role: WorkerRole, now: readonly string[]): void {
    const known = workers.addresses(role);
    for (const address of now)
      if (!known.includes(address) && workers.addWorker(role, address))
        this.options.log.info({ role, address }, 'worker found; connecting');
    for (const address of known) if (!now.includes(address)) workers.retireWorker(address);
  }
}
