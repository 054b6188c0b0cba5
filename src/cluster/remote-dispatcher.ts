/**
 * The gateway's backend in a disaggregated deployment: the same InferenceWorker contract as the colocated worker, so
 * routes, schemas, SSE, errors and metrics are shared. For each request (DESIGN §3):
 *
 *   1. pick the least loaded decode and prefill workers that are up;
 *   2. decode ← reserve(request)          → reserved(ticket) | end(failed: 429, 503, 400 re-check …)
 *   3. prefill ← prefill(request, ticket, decode's transfer address) → prefilled | end(failed: original code)
 *   4. decode → token… · end               → the request's sink
 *   5. cancel (client gone, stop sequence, deadline) → both workers; a worker connection lost → its requests fail now.
 *
 * One ending per request (I6): the first of decode's end, prefill's failure or a lost worker wins, and later messages
 * for the request are ignored. A decode-side transfer failure that races the prefill's own report waits briefly
 * (graceMs) for it, so a prefill 400 reaches the client as a 400, not as the transfer failure it caused.
 */

import type {
  GenerationSink,
  InferenceWorker,
  LogSink,
  WorkerStats,
  WorkerStatus,
} from '../engine/inference-worker.js';
import type { GenerationEnd, GenerationRequest, IsolationIncident } from '../engine/request.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { TransferTransport } from '../wire/transport.js';
import { type ControlMessage, endFromWire, type PoolStats, type WorkerHello } from './control-protocol.js';
import { WorkerLink } from './worker-link.js';

export interface WorkerModelFacts {
  modelName: string;
  vocabSize: number;
  layerCount: number;
  kvDim: number;
}

export interface RemoteDispatcherOptions {
  prefill: readonly string[];
  decode: readonly string[];
  transport: TransferTransport;
  model: WorkerModelFacts;
  /** an operator's cap on the advertised context */
  contextCap?: number;
  idleTimeoutMs: number;
  reconnectDelayMs: number;
  statsTimeoutMs: number;
  /** how long a decode-side transfer failure waits for the prefill's own report */
  graceMs: number;
  log: LogSink;
}

interface Flight {
  readonly request: GenerationRequest;
  readonly sink: GenerationSink;
  readonly decode: WorkerLink;
  prefill: WorkerLink | undefined;
  /** the prefill answered (prefilled, or failed: then the flight ended) */
  prefillDone: boolean;
  /** a decode failure held for the prefill's report */
  held: { end: GenerationEnd; timer: NodeJS.Timeout } | undefined;
}

export class RemoteDispatcher implements InferenceWorker {
  private readonly prefills: WorkerLink[];
  private readonly decodes: WorkerLink[];
  private readonly flights = new Map<string, Flight>();
  private readonly incidentListeners: ((incident: IsolationIncident) => void)[] = [];
  private advertised: number | undefined;
  private pageSize: number | undefined;

  constructor(private readonly options: RemoteDispatcherOptions) {
    if (options.prefill.length < 1 || options.decode.length < 1)
      throw new KvfenceError(
        'invalid_argument',
        'a disaggregated gateway needs at least one prefill and one decode worker',
      );
    if (options.prefill.length + options.decode.length > LIMITS.workerCountMax)
      throw new KvfenceError('invalid_argument', `at most ${LIMITS.workerCountMax} workers`);
    const link = (address: string) =>
      new WorkerLink({
        address,
        transport: options.transport,
        idleTimeoutMs: options.idleTimeoutMs,
        reconnectDelayMs: options.reconnectDelayMs,
        statsTimeoutMs: options.statsTimeoutMs,
        accept: (hello) => this.acceptHello(hello),
        onMessage: (l, m) => this.onMessage(l, m),
        onDown: (l, why) => this.onDown(l, why),
        log: options.log,
      });
    this.prefills = options.prefill.map(link);
    this.decodes = options.decode.map(link);
  }

  /** Waits for every worker's hello; the advertised context is the smallest proven one (and the cap). */
  async start(timeoutMs: number): Promise<void> {
    await Promise.all([...this.prefills, ...this.decodes].map((l) => l.waitUp(timeoutMs)));
    const contexts = [...this.prefills, ...this.decodes].map((l) => l.hello!.provenContext);
    this.advertised = Math.min(...contexts, this.options.contextCap ?? Number.POSITIVE_INFINITY);
  }

  get provenContext(): number {
    if (this.advertised === undefined)
      throw new KvfenceError('worker_unavailable', 'the workers have not connected yet');
    return this.advertised;
  }

  submit(request: GenerationRequest, sink: GenerationSink): void {
    if (this.flights.has(request.id)) throw new KvfenceError('invalid_argument', `request id ${request.id} is in use`);
    if (this.flights.size >= LIMITS.controlRequestsInFlightMax)
      throw new KvfenceError('server_overloaded', 'too many requests in flight; retry later');
    const decode = leastLoaded(this.decodes);
    if (decode === undefined)
      throw new KvfenceError('worker_unavailable', 'no decode worker is available; retry later');
    if (leastLoaded(this.prefills) === undefined)
      throw new KvfenceError('worker_unavailable', 'no prefill worker is available; retry later');
    const flight: Flight = { request, sink, decode, prefill: undefined, prefillDone: false, held: undefined };
    this.flights.set(request.id, flight);
    decode.inFlight++;
    if (!decode.send({ type: 'reserve', request })) {
      this.end(flight, lost('decode', decode));
    }
  }

  cancel(requestId: string): void {
    const flight = this.flights.get(requestId);
    if (flight === undefined) return;
    this.forget(flight);
    flight.decode.send({ type: 'cancel', request: requestId });
    if (flight.prefill !== undefined && !flight.prefillDone)
      flight.prefill.send({ type: 'cancel', request: requestId });
  }

  stats(): WorkerStats {
    const tenants = new Map<string, { requests: number; pages: number }>();
    let pagesTotal = 0;
    let pagesFree = 0;
    let reservations = 0;
    let waiting = 0;
    let running = 0;
    for (const link of [...this.prefills, ...this.decodes]) {
      const s = link.lastStats;
      if (s === undefined) continue;
      pagesTotal += s.pagesTotal;
      pagesFree += s.pagesFree;
      reservations += s.reservations;
      if (this.decodes.includes(link)) {
        waiting += s.waiting;
        running += s.running;
      }
      for (const [tenant, t] of s.tenants) {
        const sum = tenants.get(tenant) ?? { requests: 0, pages: 0 };
        tenants.set(tenant, { requests: sum.requests + t.requests, pages: sum.pages + t.pages });
      }
    }
    return { running, waiting, pagesTotal, pagesFree, tenants, reservations };
  }

  /** Fresh stats from every worker that is up (bounded by statsTimeoutMs), for /metrics and /health. */
  async refresh(): Promise<void> {
    await Promise.all([...this.prefills, ...this.decodes].map((l) => l.stats()));
  }

  workers(): WorkerStatus[] {
    const status = (l: WorkerLink, role: 'prefill' | 'decode', i: number): WorkerStatus => ({
      name: l.hello?.name ?? `${role}-${i}`,
      role,
      address: l.address,
      up: l.up,
      pagesFree: l.up ? l.lastStats?.pagesFree : undefined,
      pagesTotal: l.lastStats?.pagesTotal,
    });
    return [
      ...this.prefills.map((l, i) => status(l, 'prefill', i)),
      ...this.decodes.map((l, i) => status(l, 'decode', i)),
    ];
  }

  /** Fresh pool stats of every worker; undefined for one that is down. */
  async poolStats(): Promise<(PoolStats | undefined)[]> {
    return Promise.all([...this.prefills, ...this.decodes].map((l) => l.stats()));
  }

  onIncident(listener: (incident: IsolationIncident) => void): void {
    this.incidentListeners.push(listener);
  }

  async close(): Promise<void> {
    for (const flight of [...this.flights.values()]) {
      this.cancel(flight.request.id);
      flight.sink.onEnd({
        kind: 'failed',
        error: new KvfenceError('worker_unavailable', 'the gateway is shutting down'),
      });
    }
    for (const l of [...this.prefills, ...this.decodes]) l.close();
  }

  private acceptHello(hello: WorkerHello): string | undefined {
    const m = this.options.model;
    if (
      hello.modelName !== m.modelName ||
      hello.vocabSize !== m.vocabSize ||
      hello.layerCount !== m.layerCount ||
      hello.kvDim !== m.kvDim
    )
      return `worker ${hello.name} serves another model (${hello.modelName})`;
    if (this.pageSize !== undefined && hello.pageSize !== this.pageSize)
      return `worker ${hello.name} has KV pages of ${hello.pageSize} tokens, the cluster ${this.pageSize}`;
    if (this.advertised !== undefined && hello.provenContext < this.advertised)
      return `worker ${hello.name} proves a context of ${hello.provenContext} tokens, below the advertised ${this.advertised}`;
    if (hello.role === 'decode' && hello.transferAddress === undefined)
      return `decode worker ${hello.name} gave no transfer address`;
    this.pageSize = hello.pageSize;
    return undefined;
  }

  private onMessage(link: WorkerLink, message: ControlMessage): void {
    if (message.type === 'incident') {
      for (const listener of this.incidentListeners) listener(message.incident);
      return;
    }
    if (!('request' in message) || typeof message.request !== 'string') return;
    const flight = this.flights.get(message.request);
    if (flight === undefined) return; // ended or cancelled already: dropped
    const fromDecode = link === flight.decode;
    const fromPrefill = link === flight.prefill;
    switch (message.type) {
      case 'reserved': {
        if (!fromDecode || flight.prefill !== undefined) {
          this.end(flight, protocolError(link, message.type));
          return;
        }
        const prefill = leastLoaded(this.prefills);
        const decodeAddress = flight.decode.hello?.transferAddress;
        if (prefill === undefined || decodeAddress === undefined) {
          flight.decode.send({ type: 'cancel', request: flight.request.id });
          this.end(flight, {
            kind: 'failed',
            error: new KvfenceError('worker_unavailable', 'no prefill worker is available; retry later'),
          });
          return;
        }
        flight.prefill = prefill;
        prefill.inFlight++;
        if (!prefill.send({ type: 'prefill', request: flight.request, ticket: message.ticket, decodeAddress })) {
          flight.decode.send({ type: 'cancel', request: flight.request.id });
          this.end(flight, lost('prefill', prefill));
        }
        return;
      }
      case 'token':
        if (!fromDecode) {
          this.end(flight, protocolError(link, message.type));
          return;
        }
        flight.sink.onToken(message.token);
        return;
      case 'prefilled':
        if (!fromPrefill) {
          this.end(flight, protocolError(link, message.type));
          return;
        }
        this.prefillAnswered(flight);
        return;
      case 'end': {
        const end = endFromWire(message.end);
        if (fromPrefill) {
          this.prefillAnswered(flight);
          if (end.kind !== 'failed') {
            this.end(flight, protocolError(link, 'end(finished)'));
            return;
          }
          if (end.error.code === 'kv_transfer_failed') {
            // the decode side (or its death) tells what happened to this transfer better: wait briefly for it
            this.hold(flight, end);
            return;
          }
          flight.decode.send({ type: 'cancel', request: flight.request.id });
          this.end(flight, end);
          return;
        }
        if (!fromDecode) return;
        if (
          end.kind === 'failed' &&
          end.error.code === 'kv_transfer_failed' &&
          flight.prefill !== undefined &&
          !flight.prefillDone
        ) {
          this.hold(flight, end); // the prefill's own report may carry the original code (a 400 stays a 400)
          return;
        }
        if (end.kind === 'failed' && flight.prefill !== undefined && !flight.prefillDone)
          flight.prefill.send({ type: 'cancel', request: flight.request.id });
        this.end(flight, end);
        return;
      }
      default:
        this.end(flight, protocolError(link, message.type));
        return;
    }
  }

  /**
   * A transfer failure reported by one side waits up to graceMs for the other side's report (or its loss), which ends
   * the flight instead when it comes: a prefill's 4xx, or a dead decode's worker_unavailable.
   */
  private hold(flight: Flight, end: GenerationEnd): void {
    if (flight.held !== undefined) {
      this.end(flight, end.kind === 'failed' && end.error.code !== 'kv_transfer_failed' ? end : flight.held.end);
      return;
    }
    flight.held = { end, timer: setTimeout(() => this.end(flight, end), this.options.graceMs) };
  }

  private prefillAnswered(flight: Flight): void {
    if (flight.prefillDone) return;
    flight.prefillDone = true;
    if (flight.prefill !== undefined) flight.prefill.inFlight--;
    if (flight.held !== undefined) {
      // the prefill reported success yet decode failed: decode's failure stands
      const held = flight.held;
      queueMicrotask(() => this.end(flight, held.end));
    }
  }

  private onDown(link: WorkerLink, why: string): void {
    for (const flight of [...this.flights.values()]) {
      if (flight.decode === link) {
        if (flight.prefill !== undefined && !flight.prefillDone)
          flight.prefill.send({ type: 'cancel', request: flight.request.id });
        this.end(flight, lost('decode', link, why));
      } else if (flight.prefill === link && !flight.prefillDone) {
        flight.decode.send({ type: 'cancel', request: flight.request.id });
        this.end(flight, lost('prefill', link, why));
      }
    }
  }

  /** The one ending of a flight (I6). A failure cancels it on both workers (a no-op where it already ended). */
  private end(flight: Flight, end: GenerationEnd): void {
    if (this.flights.get(flight.request.id) !== flight) return;
    if (end.kind === 'failed') {
      flight.decode.send({ type: 'cancel', request: flight.request.id });
      if (flight.prefill !== undefined && !flight.prefillDone)
        flight.prefill.send({ type: 'cancel', request: flight.request.id });
    }
    this.forget(flight);
    flight.sink.onEnd(end);
  }

  private forget(flight: Flight): void {
    this.flights.delete(flight.request.id);
    if (flight.held !== undefined) clearTimeout(flight.held.timer);
    flight.decode.inFlight--;
    if (flight.prefill !== undefined && !flight.prefillDone) {
      flight.prefillDone = true;
      flight.prefill.inFlight--;
    }
  }
}

function leastLoaded(links: readonly WorkerLink[]): WorkerLink | undefined {
  let best: WorkerLink | undefined;
  for (const l of links) if (l.up && (best === undefined || l.inFlight < best.inFlight)) best = l;
  return best;
}

function lost(role: string, link: WorkerLink, why = 'not connected'): GenerationEnd {
  const name = link.hello?.name ?? link.address;
  return {
    kind: 'failed',
    error: new KvfenceError('worker_unavailable', `the ${role} worker ${name} went away (${why}); retry later`),
  };
}

function protocolError(link: WorkerLink, what: string): GenerationEnd {
  return {
    kind: 'failed',
    error: new KvfenceError('internal_error', `worker ${link.hello?.name ?? link.address} sent an unexpected ${what}`),
  };
}
