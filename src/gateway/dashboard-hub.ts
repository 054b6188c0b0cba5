/**
 * The dashboard's live feed (/dashboard/events): a bounded set of SSE clients and one timer that runs only while one
 * is connected. Each tick takes every worker's page map (one round at a time: a slow round skips ticks instead of
 * piling up) and sends the same JSON to every client; every fourth tick also adds a point to the throughput and TTFT
 * series. With no dashboard open nothing is built, asked of a worker or sampled.
 *
 * What leaves here: page states, tenant names, counts, request ids, times and error codes — never a prompt, a token or
 * generated text (the page maps hold none, and incidents are cut down to ids, tenant, page, code and time).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { InferenceWorker, WorkerPageMap } from '../engine/inference-worker.js';
import { errorMessage } from '../util/errors.js';
import type { GatewayMetrics } from './metrics.js';
import { type StreamBounds, StreamWriter } from './stream-writer.js';
import type { TenantGate } from './tenant-gate.js';

/** a few updates a second */
export const DASHBOARD_TICK_MS = 250;
/** a series point every this many ticks (one a second) */
const SERIES_EVERY_TICKS = 4;
/** dashboards open at once; more get 503 */
export const DASHBOARD_CLIENTS_MAX = 8;
const INCIDENTS_KEPT = 50;
/** five minutes of one-second points */
const SERIES_POINTS_MAX = 300;
/** tenants listed per update (the busiest first) */
const TENANT_ROWS_MAX = 200;
/** a dashboard that stops reading is cut like a stalled completion stream */
const CLIENT_BOUNDS: StreamBounds = { bufferedBytesMax: 1 << 20, drainTimeoutMs: 10_000 };

export interface DashboardSource {
  worker: InferenceWorker;
  gate: TenantGate;
  metrics: GatewayMetrics;
  log: FastifyBaseLogger;
}

interface IncidentRow {
  request: string;
  tenant: string;
  timeMs: number;
  code: 'kv_isolation_violation';
  page: number;
}

interface SeriesPoint {
  /** seconds since the epoch (the charts' time axis) */
  t: number;
  tokensPerS: number;
  /** mean time to first token of the requests that got one during the second; null when none did */
  ttftMs: number | null;
}

interface Counters {
  atMs: number;
  tokens: number;
  ttftSumS: number;
  ttftCount: number;
}

export class DashboardHub {
  private readonly clients = new Set<StreamWriter>();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private ticks = 0;
  private readonly incidents: IncidentRow[] = [];
  private readonly series: SeriesPoint[] = [];
  private lastCounters: Counters | undefined;
  /** page-map rounds since startup (a test's proof that none run while no dashboard is open) */
  rounds = 0;

  constructor(
    private readonly source: DashboardSource,
    private readonly now: () => number = Date.now,
  ) {
    source.worker.onIncident((incident) => {
      const { request, tenant, timeMs, violation } = incident;
      this.incidents.push({ request, tenant, timeMs, code: 'kv_isolation_violation', page: violation.page });
      if (this.incidents.length > INCIDENTS_KEPT) this.incidents.shift();
    });
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Takes over a response as an SSE stream; false (nothing written) when DASHBOARD_CLIENTS_MAX are open. */
  attach(res: ServerResponse): boolean {
    if (this.clients.size >= DASHBOARD_CLIENTS_MAX) return false;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      // never reused: when the stream ends (the gateway closing) the socket goes with it, not into keep-alive
      connection: 'close',
    });
    const writer = new StreamWriter(res, CLIENT_BOUNDS, () => this.detach(writer));
    this.clients.add(writer);
    res.on('close', () => this.detach(writer));
    writer.write(`retry: 2000\n\n${sseEvent('series', this.series)}`);
    this.timer ??= setInterval(() => void this.tick(), DASHBOARD_TICK_MS);
    void this.tick();
    return true;
  }

  /** Ends every stream (the gateway is closing: open streams would hold its close). */
  close(): void {
    for (const writer of [...this.clients]) {
      writer.end();
      this.detach(writer);
    }
  }

  private detach(writer: StreamWriter): void {
    this.clients.delete(writer);
    if (this.clients.size > 0) return;
    clearInterval(this.timer);
    this.timer = undefined;
    this.lastCounters = undefined;
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.clients.size === 0) return;
    this.ticking = true;
    try {
      if (this.ticks++ % SERIES_EVERY_TICKS === 0) {
        const point = await this.samplePoint();
        if (point !== undefined) this.broadcast(sseEvent('series', [point]));
      }
      const maps = (await this.source.worker.pageMaps?.()) ?? [];
      this.rounds++;
      this.broadcast(sseEvent('map', this.snapshot(maps)));
    } catch (error) {
      this.source.log.warn({ err: errorMessage(error) }, 'dashboard update failed');
    } finally {
      this.ticking = false;
    }
  }

  private broadcast(text: string): void {
    for (const writer of this.clients) writer.write(text);
  }

  private snapshot(maps: readonly WorkerPageMap[]): unknown {
    return {
      t: this.now(),
      workers: maps.map(({ name, role, up, report }) => ({
        name,
        role,
        up,
        ...(report === undefined
          ? {}
          : {
              pageCount: report.map.pageCount,
              pagesPerCell: report.map.pagesPerCell,
              cells: Buffer.from(report.map.cells).toString('base64'),
              owners: Buffer.from(report.map.owners).toString('base64'),
              tenants: report.map.tenants,
              transfers: report.transfers,
            }),
      })),
      tenants: this.tenantRows(maps),
      incidents: this.incidents,
    };
  }

  /**
   * Per tenant with pages or requests: pages held on the workers (counted from the same maps the grids draw, so the
   * table and the grids agree; by cells when a cell holds several pages), requests in flight and queued at the gateway.
   */
  private tenantRows(
    maps: readonly WorkerPageMap[],
  ): { tenant: string; pages: number; requests: number; queued: number }[] {
    const { gate } = this.source;
    const held = new Map<string, number>();
    for (const { report } of maps) {
      if (report === undefined) continue;
      const { cells, owners, tenants, pagesPerCell } = report.map;
      for (let cell = 0; cell < cells.length; cell++) {
        const index = owners[cell * 2]! + owners[cell * 2 + 1]! * 256;
        if (index === 0 || cells[cell] === 0) continue;
        const tenant = tenants[index - 1]!;
        held.set(tenant, (held.get(tenant) ?? 0) + pagesPerCell);
      }
    }
    const names = new Set([...held.keys(), ...gate.activeTenants()]);
    return [...names]
      .map((tenant) => ({
        tenant,
        pages: held.get(tenant) ?? 0,
        requests: gate.requestsOf(tenant),
        queued: gate.waitingOf(tenant),
      }))
      .sort((a, b) => b.pages - a.pages || b.requests - a.requests || a.tenant.localeCompare(b.tenant))
      .slice(0, TENANT_ROWS_MAX);
  }

  /** Generated tokens per second and mean TTFT since the last sample, from the gateway's own metrics. */
  private async samplePoint(): Promise<SeriesPoint | undefined> {
    const { metrics } = this.source;
    const tokens = sum((await metrics.generationTokens.get()).values);
    const ttft = (await metrics.timeToFirstToken.get()).values;
    const counters: Counters = {
      atMs: this.now(),
      tokens,
      ttftSumS: sum(ttft.filter((v) => v.metricName?.endsWith('_sum'))),
      ttftCount: sum(ttft.filter((v) => v.metricName?.endsWith('_count'))),
    };
    const last = this.lastCounters;
    this.lastCounters = counters;
    if (last === undefined || counters.atMs <= last.atMs) return undefined;
    const firsts = counters.ttftCount - last.ttftCount;
    const point: SeriesPoint = {
      t: counters.atMs / 1000,
      tokensPerS: ((counters.tokens - last.tokens) * 1000) / (counters.atMs - last.atMs),
      ttftMs: firsts > 0 ? ((counters.ttftSumS - last.ttftSumS) * 1000) / firsts : null,
    };
    this.series.push(point);
    if (this.series.length > SERIES_POINTS_MAX) this.series.shift();
    return point;
  }
}

function sseEvent(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}

function sum(values: readonly { value: number }[]): number {
  let total = 0;
  for (const v of values) total += v.value;
  return total;
}
