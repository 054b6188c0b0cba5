/**
 * /dashboard (issue 15, part 5): the admin token's sign-in, and the live page map in a real browser (Debian's
 * chromium driven by playwright-core, which never downloads one). Colocated: a tenant's pages appear while its request
 * runs (the engine is paused mid-request, so the picture holds still) and return to free after it. Disaggregated: a
 * transfer shows in flight (the prefill worker's fault plan delays one PAGE frame of that tenant's transfer). Neither
 * the page nor the SSE feed ever holds the request's prompt marker or its generated text, or the admin token.
 * Screenshots go to $KVFENCE_TEST_OUTPUT/dashboard (default: the system temp dir's kvfence-test-output/dashboard).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Browser, chromium, type Page } from 'playwright-core';
import { DASHBOARD_CLIENTS_MAX } from '../../src/gateway/dashboard-hub.js';
import { startTestCluster } from '../disagg/cluster-helpers.js';
import {
  keyFor,
  post,
  type Served,
  startTestServer,
  waitForAsync,
  writeAdminTokenFile,
  writeKeyFile,
} from '../serving/serve-helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const OUTPUT = join(process.env['KVFENCE_TEST_OUTPUT'] ?? join(tmpdir(), 'kvfence-test-output'), 'dashboard');
/** a word in the prompt that nothing else could produce */
const MARKER = 'quokkazanzibar';

function adminTokenOf(file: string): string {
  return readFileSync(file, 'utf8').trim();
}

async function get(server: Served, path: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${server.url}${path}`, {
    headers,
    redirect: 'manual',
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/**
 * The raw SSE feed, as a client sees it, kept for searching (bounded). node:http rather than fetch: an aborted fetch
 * leaves undici opening a spare connection that the server's close would wait for.
 */
function captureFeed(server: Served, token: string): { text: () => string; stop: () => void } {
  let text = '';
  const request = httpGet(
    `${server.url}/dashboard/events`,
    { headers: { authorization: `Bearer ${token}` } },
    (res) => {
      assert.equal(res.statusCode, 200);
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (text.length < 64 << 20) text += chunk;
      });
    },
  );
  request.on('error', () => {});
  return { text: () => text, stop: () => request.destroy() };
}

async function signIn(page: Page, server: Served, token: string): Promise<void> {
  await page.goto(`${server.url}/dashboard`, { timeout: 15_000 });
  await page.locator('input[name=token]').fill(token);
  await page.locator('button[type=submit]').click();
  await page.waitForSelector('#status:text("live")', { timeout: 15_000 });
}

/** Pages the dashboard shows for a tenant on a worker (0 when it shows none). */
async function tenantPages(page: Page, worker: string, tenant: string): Promise<number> {
  const item = page.locator(`section[data-worker="${worker}"] li[data-tenant="${tenant}"]`);
  return (await item.count()) === 0 ? 0 : Number(await item.getAttribute('data-pages'));
}

async function assertNoContent(page: Page, feed: string, secrets: readonly string[]): Promise<void> {
  const dom = await page.content();
  const text = await page.evaluate(
    () => (globalThis as unknown as { document: { body: { textContent: string } } }).document.body.textContent,
  );
  assert.ok(feed.includes('event: map'), 'the feed carried page maps');
  for (const secret of secrets) {
    assert.ok(!dom.includes(secret) && !text.includes(secret), `the page never holds ${JSON.stringify(secret)}`);
    assert.ok(!feed.includes(secret), `the SSE feed never holds ${JSON.stringify(secret)}`);
  }
}

function screenshotPath(name: string): string {
  mkdirSync(OUTPUT, { recursive: true });
  return join(OUTPUT, name);
}

describe('dashboard sign-in', () => {
  it('answers only to the admin token, traded once for an HttpOnly SameSite=Strict session cookie', async () => {
    const tokenFile = writeAdminTokenFile();
    const token = adminTokenOf(tokenFile);
    const server = await startTestServer({ apiKeysPath: writeKeyFile(['acme']), adminTokenFile: tokenFile });
    const off = await startTestServer({ apiKeysPath: writeKeyFile(['acme']) });
    try {
      assert.equal((await get(off, '/dashboard')).status, 404, 'no admin token: the dashboard is off');
      assert.equal((await get(off, '/dashboard/events')).status, 401);

      const login = await get(server, '/dashboard');
      assert.equal(login.status, 401);
      assert.match(login.text, /name="token"/);
      assert.equal((await get(server, '/dashboard?token=wrong-token-0123456789')).status, 401);
      assert.equal((await get(server, '/dashboard/events')).status, 401);
      assert.equal((await get(server, '/dashboard/client.js')).status, 401);
      const apiKey = { authorization: `Bearer ${keyFor('acme')}` };
      assert.equal((await get(server, '/dashboard/events', apiKey)).status, 401, 'an API key never opens it');
      assert.equal((await get(server, '/dashboard', { cookie: 'kvfence_dashboard=guessed' })).status, 401);

      const signedIn = await get(server, `/dashboard?token=${token}`);
      assert.equal(signedIn.status, 303);
      assert.equal(signedIn.headers.get('location'), '/dashboard');
      const cookie = signedIn.headers.get('set-cookie') ?? '';
      assert.match(
        cookie,
        /^kvfence_dashboard=[0-9a-f]{64}; Path=\/dashboard; HttpOnly; SameSite=Strict; Max-Age=\d+$/,
      );
      assert.ok(!cookie.includes(token), 'the cookie holds a session id, not the token');
      const session = { cookie: cookie.split(';')[0]! };
      const page = await get(server, '/dashboard', session);
      assert.equal(page.status, 200);
      assert.ok(!page.text.includes(token), 'the token is never in the page');
      assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'none'/);
      for (const asset of ['/dashboard/client.js', '/dashboard/uplot.js', '/dashboard/uplot.css'])
        assert.equal((await get(server, asset, session)).status, 200, asset);

      const form = await fetch(`${server.url}/dashboard/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token }).toString(),
        redirect: 'manual',
      });
      assert.equal(form.status, 303);
      assert.match(form.headers.get('set-cookie') ?? '', /^kvfence_dashboard=/);
      // the form's body type stays refused on the API
      const api = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Bearer ${keyFor('acme')}` },
        body: 'prompt=hi',
      });
      assert.equal(api.status, 400);

      // a bounded number of feeds: one more than the bound gets 503
      const controllers = Array.from({ length: DASHBOARD_CLIENTS_MAX }, () => new AbortController());
      const feeds = await Promise.all(
        controllers.map((c) =>
          fetch(`${server.url}/dashboard/events`, { headers: { authorization: `Bearer ${token}` }, signal: c.signal }),
        ),
      );
      assert.deepEqual(
        feeds.map((f) => f.status),
        controllers.map(() => 200),
      );
      assert.equal((await get(server, '/dashboard/events', { authorization: `Bearer ${token}` })).status, 503);
      for (const c of controllers) c.abort();
    } finally {
      await server.close();
      await off.close();
    }
  });
});

describe('dashboard in a browser', {
  skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is absent: apt-get install chromium`,
}, () => {
  let browser: Browser;
  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], timeout: 30_000 });
  });
  after(async () => {
    await browser?.close();
  });

  it('colocated: a tenant pages appear during its request and return to free after it; no content in the page', async () => {
    const tokenFile = writeAdminTokenFile();
    const token = adminTokenOf(tokenFile);
    const server = await startTestServer({ apiKeysPath: writeKeyFile(['acme', 'globex']), adminTokenFile: tokenFile });
    const feed = captureFeed(server, token);
    const page = await browser.newPage({ viewport: { width: 1200, height: 1000 } });
    try {
      await signIn(page, server, token);
      const worker = page.locator('section[data-worker="colocated"]');
      await worker.locator('li[data-state="free"]').waitFor({ timeout: 10_000 });
      assert.equal(await worker.getAttribute('data-total'), '128');
      assert.equal(await worker.getAttribute('data-free'), '128');

      // pause the engine the moment the request holds its pages, so the picture holds still while the browser looks
      const pool = server.worker.pool;
      const held = new Promise<void>((resolve) => {
        const check = () => {
          if (pool.freePageCount < pool.pageCount) {
            server.worker.pause();
            resolve();
          } else setImmediate(check);
        };
        check();
      });
      const answer = post(
        server,
        '/v1/completions',
        { model: 'tiny-test', prompt: `${MARKER} counts the pages`, max_tokens: 120, temperature: 0 },
        'acme',
      );
      await held;
      const reserved = pool.pageCount - pool.freePageCount;
      await page.waitForFunction(
        (n) => {
          const doc = (
            globalThis as unknown as {
              document: { querySelector(s: string): { getAttribute(a: string): string | null } | null };
            }
          ).document;
          return (
            doc.querySelector('section[data-worker="colocated"] li[data-tenant="acme"]')?.getAttribute('data-pages') ===
            String(n)
          );
        },
        reserved,
        { timeout: 10_000 },
      );
      assert.equal(await tenantPages(page, 'colocated', 'acme'), reserved);
      assert.equal(await tenantPages(page, 'colocated', 'globex'), 0);
      assert.equal(await worker.getAttribute('data-free'), String(pool.pageCount - reserved));
      assert.equal(await page.locator('#tenants tr[data-tenant="acme"] td').nth(1).textContent(), String(reserved));
      const shot = screenshotPath('colocated-request.png');
      await page.screenshot({ path: shot, fullPage: true });
      assert.ok(statSync(shot).size > 10_000, 'a screenshot with content');
      process.stdout.write(`# screenshot: ${shot}\n`);

      server.worker.resume();
      const done = await answer;
      assert.equal(done.status, 200);
      const generated = (done.json as { choices: { text: string }[] }).choices[0]!.text;
      await page.waitForSelector('section[data-worker="colocated"][data-free="128"]', { timeout: 10_000 });
      assert.equal(await tenantPages(page, 'colocated', 'acme'), 0, 'the tenant holds no page after its request');
      await assertNoContent(page, feed.text(), [MARKER, token, ...(generated.trim().length >= 8 ? [generated] : [])]);
    } finally {
      feed.stop();
      await page.close();
      await server.close();
    }
  });

  it('disaggregated: a transfer in flight shows with its progress; every pool whole after; no content', async () => {
    const tokenFile = writeAdminTokenFile();
    const token = adminTokenOf(tokenFile);
    const cluster = await startTestCluster({
      serve: { apiKeysPath: writeKeyFile(['acme']), adminTokenFile: tokenFile },
      // frames: 0 HELLO, 1… PAGE: the third page waits 2 s (under the 3 s idle timeout), pages 1–2 have landed
      plan: { faults: { acme: { frames: [{ kind: 'delay', frame: 3, delayMs: 2_000 }] } } },
    });
    const feed = captureFeed(cluster, token);
    const page = await browser.newPage({ viewport: { width: 1200, height: 1000 } });
    try {
      await signIn(page, cluster, token);
      await page.locator('section[data-role="decode"] li[data-state="free"]').waitFor({ timeout: 10_000 });
      assert.equal(await page.locator('section[data-role="prefill"]').count(), 1);
      const prompt = `${MARKER} ${'pages travel between workers '.repeat(4)}`;
      const answer = post(
        cluster,
        '/v1/completions',
        { model: 'tiny-test', prompt, max_tokens: 8, temperature: 0 },
        'acme',
      );
      // pages 1–2 land, then the transfer waits on the third: the row shows that progress while it waits
      const transfer = page.locator('#transfers tr[data-tenant="acme"]', { hasText: / 2 \/ \d+ pages$/ });
      await transfer.waitFor({ timeout: 10_000 });
      const [, total] = /2 \/ (\d+) pages/.exec((await transfer.locator('td').nth(3).textContent()) ?? '')!;
      assert.ok(Number(total) >= 3, `the prompt spans ${total} pages`);
      const onWire = page.locator('section[data-role="decode"] li[data-state="transferring"]');
      assert.ok(Number(await onWire.getAttribute('data-pages')) >= 3, 'the decode pool shows the pages on the wire');
      const held = (await tenantPages(page, 'prefill-0', 'acme')) + (await tenantPages(page, 'decode-0', 'acme'));
      assert.ok(held >= 3, 'the grids show the tenant pages on both workers');
      assert.equal(Number(await page.locator('#tenants tr[data-tenant="acme"] td').nth(1).textContent()), held);
      const shot = screenshotPath('disaggregated-transfer.png');
      await page.screenshot({ path: shot, fullPage: true });
      assert.ok(statSync(shot).size > 10_000, 'a screenshot with content');
      process.stdout.write(`# screenshot: ${shot}\n`);

      const done = await answer;
      assert.equal(done.status, 200, JSON.stringify(done.json));
      const generated = (done.json as { choices: { text: string }[] }).choices[0]!.text;
      await waitForAsync(
        async () =>
          page.evaluate(() => {
            const doc = (
              globalThis as unknown as {
                document: { querySelectorAll(s: string): ArrayLike<{ getAttribute(a: string): string | null }> };
              }
            ).document;
            const sections = Array.from(doc.querySelectorAll('section[data-worker]'));
            return (
              sections.length === 2 &&
              sections.every((s) => s.getAttribute('data-free') === s.getAttribute('data-total'))
            );
          }),
        'every pool free on the page',
        10_000,
      );
      assert.equal(await page.locator('#transfers tbody tr').count(), 0, 'no transfer left in flight');
      await assertNoContent(page, feed.text(), [MARKER, token, ...(generated.trim().length >= 8 ? [generated] : [])]);
    } finally {
      feed.stop();
      await page.close();
      await cluster.close();
    }
  });
});
