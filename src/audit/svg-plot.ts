/**
 * Small inline SVG plots for the HTML report (no script, no external font or stylesheet): empirical CDFs, the picture
 * a Kolmogorov–Smirnov test is about (its statistic is the largest vertical gap between two curves), and a latency
 * strip chart with a bound line.
 */
export interface Series {
  name: string;
  color: string;
  values: readonly number[];
}

const W = 560;
const H = 260;
const PAD = { left: 52, right: 16, top: 14, bottom: 40 };

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function niceTicks(lo: number, hi: number, count: number): number[] {
  const span = hi - lo || 1;
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) ticks.push(Math.round(t * 1e6) / 1e6);
  return ticks;
}

function frame(title: string, xLabel: string, yLabel: string, x: Axis, y: Axis, body: string, legend: string): string {
  const xt = niceTicks(x.lo, x.hi, 6)
    .map(
      (t) =>
        `<line x1="${x.at(t)}" x2="${x.at(t)}" y1="${PAD.top}" y2="${H - PAD.bottom}" class="grid"/>` +
        `<text x="${x.at(t)}" y="${H - PAD.bottom + 14}" text-anchor="middle">${t}</text>`,
    )
    .join('');
  const yt = niceTicks(y.lo, y.hi, 4)
    .map(
      (t) =>
        `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${y.at(t)}" y2="${y.at(t)}" class="grid"/>` +
        `<text x="${PAD.left - 6}" y="${y.at(t) + 4}" text-anchor="end">${t}</text>`,
    )
    .join('');
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" ` +
    `aria-label="${escapeXml(title)}" class="plot">` +
    `<rect x="${PAD.left}" y="${PAD.top}" width="${W - PAD.left - PAD.right}" height="${H - PAD.top - PAD.bottom}" class="area"/>` +
    `${xt}${yt}${body}` +
    `<text x="${(PAD.left + W - PAD.right) / 2}" y="${H - 6}" text-anchor="middle">${escapeXml(xLabel)}</text>` +
    `<text x="12" y="${(PAD.top + H - PAD.bottom) / 2}" text-anchor="middle" transform="rotate(-90 12 ${(PAD.top + H - PAD.bottom) / 2})">${escapeXml(yLabel)}</text>` +
    `${legend}</svg>`
  );
}

interface Axis {
  lo: number;
  hi: number;
  at(v: number): number;
}

function axis(lo: number, hi: number, from: number, to: number): Axis {
  const span = hi - lo || 1;
  return { lo, hi, at: (v) => Math.round((from + ((v - lo) / span) * (to - from)) * 10) / 10 };
}

function legendOf(series: readonly Series[]): string {
  return series
    .map((s, i) => {
      const x = PAD.left + 10 + i * 150;
      return (
        `<rect x="${x}" y="${PAD.top + 6}" width="12" height="4" fill="${s.color}"/>` +
        `<text x="${x + 16}" y="${PAD.top + 12}">${escapeXml(s.name)} (n=${s.values.length})</text>`
      );
    })
    .join('');
}

/** Empirical CDFs of the series as step lines; x in ms. */
export function ecdfPlot(title: string, series: readonly Series[]): string {
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  const lo = Math.min(0, ...all);
  const hi = Math.max(1, ...all) * 1.05;
  const x = axis(lo, hi, PAD.left, W - PAD.right);
  const y = axis(0, 1, H - PAD.bottom, PAD.top + 20);
  const lines = series
    .map((s) => {
      const v = [...s.values].filter(Number.isFinite).sort((a, b) => a - b);
      if (v.length === 0) return '';
      let d = `M${x.at(lo)},${y.at(0)}`;
      v.forEach((value, i) => {
        d += ` H${x.at(value)} V${y.at((i + 1) / v.length)}`;
      });
      d += ` H${x.at(hi)}`;
      return `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"/>`;
    })
    .join('');
  return frame(title, 'time to first token (ms)', 'fraction of requests', x, y, lines, legendOf(series));
}

/** Each series' values in order as dots (x: probe number), with a dashed horizontal bound. */
export function stripPlot(title: string, series: readonly Series[], boundMs: number): string {
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  const count = Math.max(2, ...series.map((s) => s.values.length));
  const hi = Math.max(boundMs, ...all) * 1.1;
  const x = axis(0, count + 1, PAD.left, W - PAD.right);
  const y = axis(0, hi, H - PAD.bottom, PAD.top + 20);
  const dots = series
    .map((s, k) =>
      s.values
        .map(
          (v, i) =>
            `<circle cx="${x.at(i + 1 + (k - (series.length - 1) / 2) * 0.15)}" cy="${y.at(v)}" r="4" fill="${s.color}"/>`,
        )
        .join(''),
    )
    .join('');
  const bound =
    `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${y.at(boundMs)}" y2="${y.at(boundMs)}" class="bound"/>` +
    `<text x="${W - PAD.right - 4}" y="${y.at(boundMs) - 4}" text-anchor="end">bound ${Math.round(boundMs)} ms</text>`;
  return frame(title, 'probe', 'latency (ms)', x, y, dots + bound, legendOf(series));
}
