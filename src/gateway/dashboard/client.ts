/**
 * The dashboard page's script (browser code, served as /dashboard/client.js from its compiled form). It reads the SSE
 * feed of dashboard-hub.ts and draws: each worker's pool as a canvas grid of cells coloured by state or by tenant,
 * per-worker counts, the tenants, the transfers in flight, recent incidents, and two uPlot charts. It writes text
 * content only (never HTML), and holds no token: the feed is same-origin, authorised by the session cookie.
 *
 * This project compiles without the DOM library (it is a Node program), so the few browser APIs used here are
 * declared below, as narrowly as they are used.
 */

interface Elem {
  textContent: string | null;
  className: string;
  title: string;
  readonly clientWidth: number;
  setAttribute(name: string, value: string): void;
  appendChild<T extends Elem>(child: T): T;
  replaceChildren(...children: Elem[]): void;
  remove(): void;
  addEventListener(type: string, listener: (event: PointerLike) => void): void;
}
interface PointerLike {
  offsetX: number;
  offsetY: number;
}
interface Canvas extends Elem {
  width: number;
  height: number;
  getContext(kind: '2d'): { fillStyle: string; fillRect(x: number, y: number, w: number, h: number): void } | null;
}
interface Progress extends Elem {
  value: number;
  max: number;
}
interface Radio extends Elem {
  value: string;
  checked: boolean;
}
declare const document: {
  getElementById(id: string): Elem | null;
  querySelector(selectors: string): Elem | null;
  querySelectorAll(selectors: string): ArrayLike<Radio>;
  createElement(tag: 'canvas'): Canvas;
  createElement(tag: 'progress'): Progress;
  createElement(tag: string): Elem;
};
interface Chart {
  setData(data: (number | null)[][]): void;
}
declare const window: { uPlot?: new (options: object, data: (number | null)[][], target: Elem) => Chart };

// the feed's shapes (dashboard-hub.ts)
interface Transfer {
  request: string;
  tenant: string;
  pages: number;
  pagesDone: number;
}
interface WorkerView {
  name: string;
  role: string;
  up: boolean;
  pageCount?: number;
  pagesPerCell?: number;
  cells?: string;
  owners?: string;
  tenants?: string[];
  transfers?: Transfer[];
}
interface Snapshot {
  t: number;
  workers: WorkerView[];
  tenants: { tenant: string; pages: number; requests: number; queued: number }[];
  incidents: { request: string; tenant: string; timeMs: number; code: string; page: number }[];
}
interface SeriesPoint {
  t: number;
  tokensPerS: number;
  ttftMs: number | null;
}

/** by state code (kv/page-map.ts PAGE_CELL) */
const STATES = ['free', 'reserved', 'writing', 'written', 'cached', 'transferring'];
const STATE_COLOURS = ['#e5e8e8', '#f9e79f', '#f5b041', '#2e86c1', '#8e44ad', '#e74c3c'];
const GRID_WIDTH_PX = 480;
const SERIES_KEPT = 300;

const byId = (id: string): Elem => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`the page has no #${id}`);
  return el;
};

function el(tag: string, text?: string, attrs: Record<string, string> = {}): Elem {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function bytesOf(base64: string): Uint8Array {
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function tenantColour(tenant: string): string {
  let h = 0;
  for (let i = 0; i < tenant.length; i++) h = (h * 31 + tenant.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360}, 65%, 48%)`;
}

let colourBy: 'state' | 'tenant' = 'state';
let last: Snapshot | undefined;

interface WorkerPanel {
  section: Elem;
  title: Elem;
  canvas: Canvas;
  states: Elem;
  tenants: Elem;
}
const panels = new Map<string, WorkerPanel>();

function panelOf(w: WorkerView): WorkerPanel {
  let panel = panels.get(w.name);
  if (panel === undefined) {
    const section = byId('workers').appendChild(el('section', undefined, { 'data-worker': w.name, class: 'worker' }));
    panel = {
      section,
      title: section.appendChild(el('strong')),
      canvas: section.appendChild(document.createElement('canvas')),
      states: section.appendChild(el('ul', undefined, { class: 'legend' })),
      tenants: section.appendChild(el('ul', undefined, { class: 'legend' })),
    };
    const p = panel;
    p.canvas.addEventListener('pointermove', (event) => {
      p.canvas.title = describeCell(w.name, event.offsetX, event.offsetY);
    });
    panels.set(w.name, panel);
  }
  return panel;
}

/** Cell size and columns for a pool's picture: large pools get small cells, the grid keeps one width. */
function gridOf(cellCount: number): { px: number; cols: number } {
  const px = cellCount <= 256 ? 14 : cellCount <= 1024 ? 10 : cellCount <= 4096 ? 6 : 3;
  return { px, cols: Math.floor(GRID_WIDTH_PX / px) };
}

function describeCell(worker: string, x: number, y: number): string {
  const w = last?.workers.find((v) => v.name === worker);
  if (w?.cells === undefined || w.owners === undefined || w.tenants === undefined) return '';
  const cells = bytesOf(w.cells);
  const owners = bytesOf(w.owners);
  const { px, cols } = gridOf(cells.length);
  const cell = Math.floor(y / px) * cols + Math.floor(x / px);
  if (cell < 0 || cell >= cells.length) return '';
  const ppc = w.pagesPerCell ?? 1;
  const owner = owners[cell * 2]! + owners[cell * 2 + 1]! * 256;
  const pages = ppc === 1 ? `page ${cell}` : `pages ${cell * ppc}–${cell * ppc + ppc - 1}`;
  return `${pages}: ${STATES[cells[cell]!]}${owner > 0 ? `, tenant ${w.tenants[owner - 1]}` : ''}`;
}

function drawWorker(w: WorkerView): void {
  const panel = panelOf(w);
  panel.section.className = w.up ? 'worker' : 'worker down';
  panel.section.setAttribute('data-role', w.role);
  panel.section.setAttribute('data-up', String(w.up));
  if (w.cells === undefined || w.owners === undefined || w.tenants === undefined || w.pageCount === undefined) {
    panel.title.textContent = `${w.name} (${w.role}): no answer`;
    return;
  }
  const cells = bytesOf(w.cells);
  const owners = bytesOf(w.owners);
  const ppc = w.pagesPerCell ?? 1;
  const { px, cols } = gridOf(cells.length);
  const rows = Math.ceil(cells.length / cols);
  if (panel.canvas.width !== cols * px || panel.canvas.height !== rows * px) {
    panel.canvas.width = cols * px;
    panel.canvas.height = rows * px;
  }
  const ctx = panel.canvas.getContext('2d');
  const stateCounts = new Array<number>(STATES.length).fill(0);
  const tenantPages = new Map<string, number>();
  const gap = px >= 6 ? 1 : 0;
  for (let cell = 0; cell < cells.length; cell++) {
    const state = cells[cell]!;
    const owner = owners[cell * 2]! + owners[cell * 2 + 1]! * 256;
    const tenant = owner > 0 ? w.tenants[owner - 1] : undefined;
    // the last cell may cover fewer pages than the others
    const pages = Math.min(ppc, w.pageCount - cell * ppc);
    stateCounts[state] = stateCounts[state]! + pages;
    if (tenant !== undefined && state !== 0) tenantPages.set(tenant, (tenantPages.get(tenant) ?? 0) + pages);
    if (ctx === null) continue;
    ctx.fillStyle =
      colourBy === 'tenant' && tenant !== undefined && state !== 0 ? tenantColour(tenant) : STATE_COLOURS[state]!;
    ctx.fillRect((cell % cols) * px, Math.floor(cell / cols) * px, px - gap, px - gap);
  }
  panel.section.setAttribute('data-total', String(w.pageCount));
  panel.section.setAttribute('data-free', String(stateCounts[0]));
  panel.title.textContent =
    `${w.name} (${w.role}${w.up ? '' : ', down'}): ${w.pageCount} pages, ${stateCounts[0]} free` +
    (ppc > 1 ? ` · ${ppc} pages a cell` : '');
  panel.states.replaceChildren(
    ...STATES.map((name, i) =>
      legendItem(STATE_COLOURS[i]!, `${name} ${stateCounts[i]}`, {
        'data-state': name,
        'data-pages': `${stateCounts[i]}`,
      }),
    ),
  );
  panel.tenants.replaceChildren(
    ...[...tenantPages].map(([tenant, pages]) =>
      legendItem(tenantColour(tenant), `${tenant} ${pages}`, { 'data-tenant': tenant, 'data-pages': String(pages) }),
    ),
  );
}

function legendItem(colour: string, text: string, attrs: Record<string, string>): Elem {
  const li = el('li', undefined, attrs);
  const swatch = li.appendChild(el('span', undefined, { class: 'swatch', style: `background:${colour}` }));
  swatch.title = text;
  li.appendChild(el('span', text));
  return li;
}

function fillTable(id: string, rows: Elem[]): void {
  const body = document.querySelector(`#${id} tbody`);
  body?.replaceChildren(...rows);
}

function row(cells: (string | Elem)[], attrs: Record<string, string> = {}, numeric: readonly number[] = []): Elem {
  const tr = el('tr', undefined, attrs);
  cells.forEach((c, i) => {
    const td = tr.appendChild(el('td', undefined, numeric.includes(i) ? { class: 'num' } : {}));
    if (typeof c === 'string') td.textContent = c;
    else td.appendChild(c);
  });
  return tr;
}

function draw(snapshot: Snapshot): void {
  last = snapshot;
  byId('updated').textContent = `updated ${new Date(snapshot.t).toLocaleTimeString()}`;
  const names = new Set(snapshot.workers.map((w) => w.name));
  for (const [name, panel] of panels)
    if (!names.has(name)) {
      panel.section.remove();
      panels.delete(name);
    }
  for (const w of snapshot.workers) drawWorker(w);
  fillTable(
    'tenants',
    snapshot.tenants.map((t) =>
      row([t.tenant, String(t.pages), String(t.requests), String(t.queued)], { 'data-tenant': t.tenant }, [1, 2, 3]),
    ),
  );
  const transfers = snapshot.workers.flatMap((w) => (w.transfers ?? []).map((t) => ({ ...t, worker: w.name })));
  fillTable(
    'transfers',
    transfers.map((t) => {
      const bar = document.createElement('progress');
      bar.max = Math.max(1, t.pages);
      bar.value = t.pagesDone;
      const progress = el('span');
      progress.appendChild(bar);
      progress.appendChild(el('span', ` ${t.pagesDone} / ${t.pages} pages`));
      return row([t.request, t.tenant, t.worker, progress], { 'data-transfer': t.request, 'data-tenant': t.tenant });
    }),
  );
  fillTable(
    'incidents',
    [...snapshot.incidents].reverse().map((i) =>
      row([new Date(i.timeMs).toISOString(), i.request, i.tenant, i.code, String(i.page)], {
        'data-incident': i.request,
      }),
    ),
  );
}

// charts: the last SERIES_KEPT one-second points
const times: number[] = [];
const throughput: number[] = [];
const ttft: (number | null)[] = [];
const charts: { throughput: Chart; ttft: Chart } | undefined = (() => {
  const UPlot = window.uPlot;
  if (UPlot === undefined) return undefined;
  const options = (title: string, label: string, stroke: string) => ({
    title,
    width: 460,
    height: 200,
    scales: { x: { time: true } },
    series: [{}, { label, stroke, width: 2 }],
  });
  return {
    throughput: new UPlot(options('generated tokens / s', 'tokens/s', '#2e86c1'), [[], []], byId('chart-throughput')),
    ttft: new UPlot(options('time to first token (ms)', 'TTFT ms', '#c0392b'), [[], []], byId('chart-ttft')),
  };
})();

function addPoints(points: SeriesPoint[]): void {
  for (const p of points) {
    times.push(p.t);
    throughput.push(p.tokensPerS);
    ttft.push(p.ttftMs);
  }
  const extra = times.length - SERIES_KEPT;
  if (extra > 0) for (const list of [times, throughput, ttft]) list.splice(0, extra);
  if (times.length < 2) return; // one point gives the time axis no span
  charts?.throughput.setData([times, throughput]);
  charts?.ttft.setData([times, ttft]);
}

for (const radio of Array.from(document.querySelectorAll('input[name=colour]'))) {
  radio.addEventListener('change', () => {
    colourBy = radio.value === 'tenant' ? 'tenant' : 'state';
    if (last !== undefined) draw(last);
  });
}

const feed = new EventSource('/dashboard/events');
feed.addEventListener('open', () => {
  byId('status').textContent = 'live';
});
feed.addEventListener('error', () => {
  byId('status').textContent = 'reconnecting…';
});
feed.addEventListener('map', (event) => draw(JSON.parse((event as unknown as { data: string }).data) as Snapshot));
feed.addEventListener('series', (event) =>
  addPoints(JSON.parse((event as unknown as { data: string }).data) as SeriesPoint[]),
);

export {};
