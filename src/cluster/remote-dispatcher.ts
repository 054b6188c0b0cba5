/**
 * The gateway's backend in a disaggregated deployment: the same InferenceWorker contract as the colocated worker, so
 * routes, schemas, SSE, errors and metrics are shared. For each request (DESIGN §3):
 *
 *   1. pick the least loaded decode worker that is up;
 *   2. decode ← reserve(request)          → reserved(ticket) | end(failed: 503, 400 re-check …)
 *   3. prefill ← prefill(request, ticket, decode's transfer address) → prefilled | end(failed: original code)
 *   4. decode → token… · end               → the request's sink
 *   5. cancel (client gone, stop sequence, deadline) → both workers; a worker connection lost → its requests fail now.
 *
 * Each request is a Flight whose state moves only through flight.ts's transition table; `end` is the one ending
 * (I6): it cancels the request on every worker that still holds it and gives back each worker's routing count once.
 * With prefix caches on the prefill workers, a request goes to the prefill worker its tenant's prompt head maps to
 * (unless that one is much busier), so a tenant's shared prompt heads meet their cache.
 *
 * The set of workers can change while serving (worker-discovery.ts): `addWorker` opens a link, `retireWorker` drains
 * one. A draining link — retired, or its worker said `draining` on SIGTERM — gets no new request; its requests run
 * to their end, and then its connection is closed (a retired link is dropped, a static one reconnects to the
 * worker's successor). So a rolling restart fails no request while each role keeps one routable worker.
 */
import { createHash } from 'node:crypto';
import type {
  GenerationSink,
  InferenceWorker,
  WorkerPageMap,
  WorkerStats,
  WorkerStatus,
} from '../engine/inference-worker.js';
import type { GenerationEnd, GenerationRequest, IsolationIncident } from '../engine/request.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import type { LogSink } from '../util/log.js';
import type { TransferTransport } from '../wire/transport.js';
import {
  type ControlMessage,
  endFromWire,
  type PoolStats,
  type WorkerHello,
  type WorkerRole,
} from './control-protocol.js';
import { type FlightEvent, type FlightState, nextAction } from './flight.js';
import { PageMapRequests } from './page-map-requests.js';
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
  /** a worker connection silent this long (no answer to the heartbeat) is closed and its requests fail (503) */
  workerSilenceMs: number;
  /** how long a transfer failure seen by one side waits for the other side's report */
  graceMs: number;
  log: LogSink;
}

interface Flight {
  readonly request: GenerationRequest;
  readonly sink: GenerationSink;
  readonly decode: WorkerLink;
  prefill: WorkerLink | undefined;
  state: FlightState;
  /** the workers that still hold the request (have not reported its end): whom `end` cancels */
  decodeHolds: boolean;
  prefillHolds: boolean;
  graceTimer: NodeJS.Timeout | undefined;
}

/** How much busier than the least loaded the prefill worker of a prompt head may be before another is used. */
const AFFINITY_SLACK = 4;

export class RemoteDispatcher implements InferenceWorker {
  private readonly prefills: WorkerLink[] = [];
  private readonly decodes: WorkerLink[] = [];
  private readonly flights = new Map<string, Flight>();
  private readonly incidentListeners: ((incident: IsolationIncident) => void)[] = [];
  private advertised: number | undefined;
  private clusterPageSize: number | undefined;
  private readonly pageMapRequests: PageMapRequests;
  private mapping: Promise<WorkerPageMap[]> | undefined;

  constructor(private readonly options: RemoteDispatcherOptions) {
    if (options.prefill.length < 1 || options.decode.length < 1)
      throw new KvfenceError(
        'invalid_argument',
        'a disaggregated gateway needs at least one prefill and one decode worker',
      );
    if (options.prefill.length + options.decode.length > LIMITS.workerCountMax)
      throw new KvfenceError('invalid_argument', `at most ${LIMITS.workerCountMax} workers`);
    this.pageMapRequests = new PageMapRequests(options.statsTimeoutMs);
    for (const address of options.prefill) this.addWorker('prefill', address);
    for (const address of options.decode) this.addWorker('decode', address);
  }

  /** Opens a link to a new worker (discovery found it); false when the address is known or the bound is reached. */
  addWorker(role: WorkerRole, address: string): boolean {
    const all = [...this.prefills, ...this.decodes];
    if (all.some((l) => l.address === address && !l.retired)) return false;
    if (all.length >= LIMITS.workerCountMax) {
      this.options.log.warn({ address, max: LIMITS.workerCountMax }, 'worker not added: at the worker bound');
      return false;
    }
    const link = new WorkerLink({
      address,
      transport: this.options.transport,
      idleTimeoutMs: this.options.idleTimeoutMs,
      reconnectDelayMs: this.options.reconnectDelayMs,
      statsTimeoutMs: this.options.statsTimeoutMs,
      silenceMs: this.options.workerSilenceMs,
      accept: (hello) =>
        hello.role !== role ? `worker ${hello.name} is a ${hello.role} worker, not ${role}` : this.acceptHello(hello),
      onMessage: (l, m) => this.onMessage(l, m),
      onDown: (l, why) => this.onDown(l, why),
      onDraining: (l) => this.checkDrained(l),
      log: this.options.log,
    });
    (role === 'prefill' ? this.prefills : this.decodes).push(link);
    return true;
  }

  /** The worker at `address` left discovery: it gets nothing new, and its link closes once it holds nothing. */
  retireWorker(address: string): void {
    for (const link of [...this.prefills, ...this.decodes]) {
      if (link.address !== address || link.retired) continue;
      link.retired = true;
      this.options.log.info({ worker: address, inFlight: link.inFlight }, 'worker retired; draining it');
      this.checkDrained(link);
    }
  }

  /** Addresses of the workers of `role` that are not retired (what discovery compares its answers with). */
  addresses(role: WorkerRole): string[] {
    return (role === 'prefill' ? this.prefills : this.decodes).filter((l) => !l.retired).map((l) => l.address);
  }

  /** Requests in flight now (the gateway's drain waits for none). */
  get inFlight(): number {
    return this.flights.size;
  }

  /**
   * Waits for every worker's hello — or, with `anyOfEachRole` (workers found by DNS, where an address may not
   * answer), for one of each role; the advertised context is the smallest proven one (and the cap). A worker that
   * answers later must prove at least that.
   */
  async start(timeoutMs: number, anyOfEachRole = false): Promise<void> {
    const links = [...this.prefills, ...this.decodes];
    if (anyOfEachRole)
      await Promise.all(
        [this.prefills, this.decodes].map((ls) =>
          Promise.any(ls.map((l) => l.waitUp(timeoutMs))).catch((e: AggregateError) => {
            throw e.errors[0];
          }),
        ),
      );
    else await Promise.all(links.map((l) => l.waitUp(timeoutMs)));
    const contexts = links.filter((l) => l.up).map((l) => l.hello!.provenContext);
    this.advertised = Math.min(...contexts, this.options.contextCap ?? Number.POSITIVE_INFINITY);
  }

  get provenContext(): number {
    if (this.advertised === undefined)
      throw new KvfenceError('worker_unavailable', 'the workers have not connected yet');
    return this.advertised;
  }

  get pageSize(): number {
    if (this.clusterPageSize === undefined)
      throw new KvfenceError('worker_unavailable', 'the workers have not connected yet');
    return this.clusterPageSize;
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
    const flight: Flight = {
      request,
      sink,
      decode,
      prefill: undefined,
      state: { name: 'reserving' },
      decodeHolds: true,
      prefillHolds: false,
      graceTimer: undefined,
    };
    this.flights.set(request.id, flight);
    decode.inFlight++;
    if (!decode.send({ type: 'reserve', request })) this.end(flight, lost('decode'));
  }

  /** Answer `choice` ended at the gateway (a stop sequence): its decode worker stops generating it, if it can. */
  endChoice(requestId: string, choice: number): void {
    const flight = this.flights.get(requestId);
    if (flight?.decodeHolds === true && flight.decode.hello?.endChoice === true)
      flight.decode.send({ type: 'end_choice', request: requestId, choice });
  }

  /** The client is gone (or a stop sequence ended it): both workers drop it; the sink hears nothing more. */
  cancel(requestId: string): void {
    const flight = this.flights.get(requestId);
    if (flight !== undefined) this.end(flight, undefined);
  }

  stats(): WorkerStats {
    const tenants = new Map<string, { requests: number; pages: number }>();
    let pagesTotal = 0;
    let pagesFree = 0;
    let pagesCached = 0;
    let pagesReused = 0;
    let reservations = 0;
    let waiting = 0;
    let running = 0;
    for (const link of [...this.prefills, ...this.decodes]) {
      const s = link.lastStats;
      if (s === undefined) continue;
      pagesTotal += s.pagesTotal;
      pagesFree += s.pagesFree;
      pagesCached += s.pagesCached ?? 0;
      pagesReused += s.pagesReused ?? 0;
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
    return { running, waiting, pagesTotal, pagesFree, pagesCached, pagesReused, tenants, reservations };
  }

  private refreshing: Promise<void> | undefined;

  /** Fresh stats from every worker that is up (bounded by statsTimeoutMs), for /metrics and /health. */
  async refresh(): Promise<void> {
    // one round at a time, however many callers (/health and /metrics are public: polling them costs one round)
    this.refreshing ??= Promise.all([...this.prefills, ...this.decodes].map((l) => l.stats()))
      .then(() => {})
      .finally(() => {
        this.refreshing = undefined;
      });
    await this.refreshing;
  }

  workers(): WorkerStatus[] {
    // `up` is what routing sees: a draining worker finishes its requests but takes no new one
    const status = (l: WorkerLink, role: 'prefill' | 'decode', i: number): WorkerStatus => ({
      name: l.name ?? `${role}-${i}`,
      role,
      address: l.address,
      up: l.routable,
      pagesFree: l.up ? l.lastStats?.pagesFree : undefined,
      pagesTotal: l.lastStats?.pagesTotal,
    });
    return [
      ...this.prefills.map((l, i) => status(l, 'prefill', i)),
      ...this.decodes.map((l, i) => status(l, 'decode', i)),
    ];
  }

  /** Fresh pool stats of every worker (prefill workers first); undefined for one that is down. */
  async poolStats(): Promise<(PoolStats | undefined)[]> {
    return Promise.all([...this.prefills, ...this.decodes].map((l) => l.stats()));
  }

  /** Every worker's page map (prefill workers first), for the dashboard: one round at a time, however many ask. */
  pageMaps(): Promise<WorkerPageMap[]> {
    const links = [...this.prefills, ...this.decodes];
    const status = this.workers();
    this.mapping ??= Promise.all(
      links.map(async (link, i): Promise<WorkerPageMap> => {
        const { name, role, up } = status[i]!;
        return { name, role, up, report: await this.pageMapRequests.ask(link) };
      }),
    ).finally(() => {
      this.mapping = undefined;
    });
    return this.mapping;
  }

  onIncident(listener: (incident: IsolationIncident) => void): void {
    this.incidentListeners.push(listener);
  }

  async close(): Promise<void> {
    const error = new KvfenceError('worker_unavailable', 'the gateway is shutting down');
    for (const flight of [...this.flights.values()]) this.end(flight, { kind: 'failed', error });
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
    if (this.clusterPageSize !== undefined && hello.pageSize !== this.clusterPageSize)
      return `worker ${hello.name} has KV pages of ${hello.pageSize} tokens, the cluster ${this.clusterPageSize}`;
    if (this.advertised !== undefined && hello.provenContext < this.advertised)
      return `worker ${hello.name} proves a context of ${hello.provenContext} tokens, below the advertised ${this.advertised}`;
    if (hello.role === 'decode' && hello.transferAddress === undefined)
      return `decode worker ${hello.name} gave no transfer address`;
    this.clusterPageSize = hello.pageSize;
    return undefined;
  }

  private onMessage(link: WorkerLink, message: ControlMessage): void {
    if (message.type === 'incident') {
      for (const listener of this.incidentListeners) listener(message.incident);
      return;
    }
    if (message.type === 'page_map') {
      this.pageMapRequests.answer(link, message.id, message.report);
      return;
    }
    if (!('request' in message) || typeof message.request !== 'string') return;
    const flight = this.flights.get(message.request);
    if (flight === undefined) return; // ended or cancelled already: dropped
    const event = this.eventOf(flight, link, message);
    if (event === undefined) {
      this.end(flight, {
        kind: 'failed',
        error: new KvfenceError('internal_error', `a worker sent an unexpected ${message.type}`),
      });
      return;
    }
    if (event.kind === 'decode_end') this.settle(flight, 'decode');
    if (event.kind === 'prefill_end' || event.kind === 'prefilled') this.settle(flight, 'prefill');
    this.apply(flight, event);
  }

  /** A message as an event of its flight, if it came from the worker that may send it. */
  private eventOf(flight: Flight, link: WorkerLink, message: ControlMessage): FlightEvent | undefined {
    const fromDecode = link === flight.decode;
    const fromPrefill = link === flight.prefill;
    switch (message.type) {
      case 'reserved':
        return fromDecode ? { kind: 'reserved', ticket: message.ticket } : undefined;
      case 'token':
        return fromDecode ? { kind: 'token', token: message.token, choice: message.choice ?? 0 } : undefined;
      case 'prefilled':
        return fromPrefill ? { kind: 'prefilled' } : undefined;
      case 'end': {
        const end = endFromWire(message.end);
        if (fromDecode) return { kind: 'decode_end', end };
        return fromPrefill ? { kind: 'prefill_end', end } : undefined;
      }
      default:
        return undefined;
    }
  }

  private apply(flight: Flight, event: FlightEvent): void {
    const action = nextAction(flight.state, event);
    switch (action.kind) {
      case 'start_prefill':
        this.startPrefill(flight, action.ticket);
        return;
      case 'deliver':
        flight.sink.onToken(action.token, action.choice);
        return;
      case 'move':
        flight.state = action.to;
        return;
      case 'hold':
        flight.state = action.to;
        flight.graceTimer = setTimeout(() => this.apply(flight, { kind: 'grace_over' }), this.options.graceMs);
        return;
      case 'end':
        this.end(flight, action.end);
        return;
    }
  }

  /** Step 3: the job goes to a prefill worker with the decode worker's ticket and transfer address. */
  private startPrefill(flight: Flight, ticket: TransferTicket): void {
    const prefill = this.pickPrefill(flight.request);
    const decodeAddress = flight.decode.hello?.transferAddress;
    if (prefill === undefined || decodeAddress === undefined) {
      this.end(flight, {
        kind: 'failed',
        error: new KvfenceError('worker_unavailable', 'no prefill worker is available; retry later'),
      });
      return;
    }
    flight.prefill = prefill;
    flight.prefillHolds = true;
    prefill.inFlight++;
    flight.state = { name: 'transferring' };
    if (!prefill.send({ type: 'prefill', request: flight.request, ticket, decodeAddress }))
      this.end(flight, lost('prefill'));
  }

  private onDown(link: WorkerLink, why: string): void {
    for (const flight of [...this.flights.values()]) {
      if (flight.decode === link && flight.decodeHolds) this.end(flight, lost('decode'));
      else if (flight.prefill === link && flight.prefillHolds) this.end(flight, lost('prefill'));
      else continue;
      this.options.log.warn(
        { request: flight.request.id, worker: link.address, why },
        'a worker of the request went away',
      );
    }
    if (link.retired) this.drop(link);
  }

  /**
   * A draining link that holds nothing more is closed: dropped when retired, else its connection ends (the worker's
   * cue to exit) and the link reconnects to its successor. Deferred a turn: it may run inside that link's own message.
   */
  private checkDrained(link: WorkerLink): void {
    if (!link.draining || link.inFlight > 0) return;
    setImmediate(() => {
      if (!link.draining || link.inFlight > 0) return;
      if (link.retired) this.drop(link);
      else link.endConnection('the worker drained');
    });
  }

  private drop(link: WorkerLink): void {
    link.close('the worker was retired');
    for (const list of [this.prefills, this.decodes]) {
      const i = list.indexOf(link);
      if (i >= 0) list.splice(i, 1);
    }
  }

  /** A worker reported the request's end (or its own part done): it no longer holds it. */
  private settle(flight: Flight, side: 'decode' | 'prefill'): void {
    if (side === 'decode' && flight.decodeHolds) {
      flight.decodeHolds = false;
      flight.decode.inFlight--;
      this.checkDrained(flight.decode);
    } else if (side === 'prefill' && flight.prefillHolds) {
      flight.prefillHolds = false;
      flight.prefill!.inFlight--;
      this.checkDrained(flight.prefill!);
    }
    assert(flight.decode.inFlight >= 0 && (flight.prefill?.inFlight ?? 0) >= 0, 'routing counts stay non-negative');
  }

  /**
   * The one ending of a flight (I6): every worker still holding it is told to cancel (and frees and scrubs), each
   * worker's routing count goes down once, and the sink hears `end` — or nothing, for a client's own cancel.
   */
  private end(flight: Flight, end: GenerationEnd | undefined): void {
    if (this.flights.get(flight.request.id) !== flight) return;
    this.flights.delete(flight.request.id);
    flight.state = { name: 'ended' };
    if (flight.graceTimer !== undefined) clearTimeout(flight.graceTimer);
    for (const side of ['decode', 'prefill'] as const) {
      const holds = side === 'decode' ? flight.decodeHolds : flight.prefillHolds;
      if (!holds) continue;
      (side === 'decode' ? flight.decode : flight.prefill!).send({ type: 'cancel', request: flight.request.id });
      this.settle(flight, side);
    }
    if (end !== undefined) flight.sink.onEnd(end);
  }

  private pickPrefill(request: GenerationRequest): WorkerLink | undefined {
    const least = leastLoaded(this.prefills);
    // a prefill worker with a prefix cache says so in its hello: then a tenant's prompt heads go to the same one
    const caching = this.prefills.some((l) => l.hello?.prefixCachePages !== undefined);
    if (!caching || least === undefined) return least;
    const pageSize = this.pageSize;
    if (request.promptTokens.length <= pageSize) return least; // no whole page to reuse
    const head = Int32Array.from(request.promptTokens.slice(0, pageSize));
    const digest = createHash('sha256').update(request.tenant, 'utf8').update(new Uint8Array(head.buffer)).digest();
    const preferred = this.prefills[digest.readUInt32LE(0) % this.prefills.length]!;
    return preferred.routable && preferred.inFlight <= least.inFlight + AFFINITY_SLACK ? preferred : least;
  }
}

function leastLoaded(links: readonly WorkerLink[]): WorkerLink | undefined {
  let best: WorkerLink | undefined;
  for (const l of links) if (l.routable && (best === undefined || l.inFlight < best.inFlight)) best = l;
  return best;
}

/** What a client learns of a lost worker: its role, never its address or name (I12); the log has the rest. */
function lost(role: 'prefill' | 'decode'): GenerationEnd {
  return {
    kind: 'failed',
    error: new KvfenceError('worker_unavailable', `a ${role} worker went away; retry later`),
  };
}
