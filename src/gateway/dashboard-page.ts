/**
 * The dashboard's two HTML pages: the login form and the dashboard's static frame. Neither holds any data, the admin
 * token included: the frame is filled by dashboard/client.ts from the SSE feed, which writes only text content (never
 * HTML), so a tenant name cannot become markup.
 */

const CSS = `
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#1c2833;background:#fbfcfc}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px;border-bottom:1px solid #d5d8dc;padding-bottom:3px}
.meta{color:#566573}.bad{color:#922b21;font-weight:600}
table{border-collapse:collapse;margin:4px 0}th,td{border:1px solid #d5d8dc;padding:2px 8px;text-align:left}
th{background:#f2f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.worker{display:inline-block;vertical-align:top;margin:0 16px 12px 0;padding:8px;border:1px solid #d5d8dc;border-radius:4px;background:#fff}
.worker.down{opacity:.5}.worker canvas{display:block;margin:6px 0;image-rendering:pixelated}
ul.legend{list-style:none;padding:0;margin:2px 0}ul.legend li{display:inline-block;margin-right:10px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #aab7b8}
.charts{display:flex;flex-wrap:wrap;gap:16px}progress{width:140px}
form.login{margin:40px auto;max-width:360px;padding:16px;border:1px solid #d5d8dc;border-radius:4px;background:#fff}
form.login input[type=password]{width:100%;box-sizing:border-box;margin:8px 0;padding:4px}
`;

const HEAD = (title: string, extra = '') =>
  `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
  `<title>${title}</title><style>${CSS}</style>${extra}</head>`;

/** The login form; `failed` says the last token was wrong (which token is never echoed). */
export function loginPage(failed: boolean): string {
  return (
    `${HEAD('kvfence dashboard: sign in')}<body><form class="login" method="post" action="/dashboard/login">` +
    `<h1>kvfence dashboard</h1><p class="meta">The operator's admin token (the file given to --admin-token-file).</p>` +
    (failed ? `<p class="bad" id="login-failed">That is not the admin token.</p>` : '') +
    `<input type="password" name="token" autocomplete="current-password" required autofocus>` +
    `<button type="submit">Sign in</button></form></body></html>`
  );
}

export function dashboardOffPage(): string {
  return (
    `${HEAD('kvfence dashboard: off')}<body><h1>kvfence dashboard</h1>` +
    `<p>The dashboard is off: start the gateway with <code>--admin-token-file FILE</code> to turn it on.</p></body></html>`
  );
}

/** The frame; client.js fills every element below from /dashboard/events. */
export function dashboardPage(): string {
  return (
    `${HEAD('kvfence dashboard', '<link rel="stylesheet" href="/dashboard/uplot.css">')}<body>` +
    `<h1>kvfence: KV pages, live</h1>` +
    `<p class="meta"><span id="status">connecting…</span> · <span id="updated"></span> · colour by ` +
    `<label><input type="radio" name="colour" value="state" checked> state</label> ` +
    `<label><input type="radio" name="colour" value="tenant"> tenant</label></p>` +
    `<ul class="legend" id="state-legend"></ul>` +
    `<div id="workers"></div>` +
    `<h2>Tenants</h2><table id="tenants"><thead><tr><th>tenant</th><th>pages</th><th>requests</th><th>queued</th></tr></thead><tbody></tbody></table>` +
    `<h2>Transfers in flight</h2><table id="transfers"><thead><tr><th>request</th><th>tenant</th><th>decode worker</th><th>progress</th></tr></thead><tbody></tbody></table>` +
    `<h2>Recent isolation incidents</h2><table id="incidents"><thead><tr><th>time</th><th>request</th><th>tenant</th><th>code</th><th>page</th></tr></thead><tbody></tbody></table>` +
    `<h2>Throughput and time to first token</h2><div class="charts"><div id="chart-throughput"></div><div id="chart-ttft"></div></div>` +
    `<script src="/dashboard/uplot.js"></script><script type="module" src="/dashboard/client.js"></script>` +
    `</body></html>`
  );
}
