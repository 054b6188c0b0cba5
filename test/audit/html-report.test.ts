/**
 * `kvfence audit --html FILE`: one self-contained page. An audit of a fake endpoint with a shared prompt cache that
 * serves first-come-first-served (so both timing scenarios have findings and plots) is written as HTML, checked for
 * keys (none may appear), and rendered in headless Chromium (Debian's `chromium`, driven by playwright-core; no
 * browser is ever downloaded) with every network request refused: the page must render whole without one. The
 * screenshot is saved in a temp directory (its path is printed).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { AUDIT_EXIT } from '../../src/audit/findings.js';
import { runAuditCommand } from '../../src/cli/audit-command.js';
import { tempDirectory } from '../helpers/temp.js';
import { FAKE_KEYS, FAKE_KEYS_TEXT, startFakeServer } from './fake-openai-server.js';

const CHROMIUM = '/usr/bin/chromium';

describe('HTML report', () => {
  it('is self-contained, carries no key, and renders in headless Chromium', async (t) => {
    const dir = tempDirectory('kvfence-audit-html-');
    const keys = join(dir, 'keys.txt');
    const html = join(dir, 'report.html');
    writeFileSync(keys, FAKE_KEYS_TEXT);
    const server = await startFakeServer({
      mode: 'honest',
      context: 160,
      inFlightMax: 256,
      tokenDelayMs: 0.5,
      prefillMsPerWord: 0.1,
      cache: 'shared',
      fcfs: true,
    });
    let exitCode: number;
    try {
      exitCode = await runAuditCommand(
        {
          target: server.url,
          keys,
          requests: 1000,
          concurrency: 8,
          html,
          seed: 3,
          api: 'completions',
          maxTokens: 4,
          timeout: 10_000,
          logprobTolerance: 'auto',
          matchChars: 12,
          stormSize: 8,
          scenarios: ['prompt_cache', 'noisy_neighbour'],
        },
        { stdout: { write: () => true }, stderr: { isTTY: false, write: () => true } },
      );
    } finally {
      await server.close();
    }
    assert.equal(exitCode, AUDIT_EXIT.findings);
    const text = readFileSync(html, 'utf8');
    for (const key of Object.keys(FAKE_KEYS)) assert.ok(!text.includes(key), 'no API key in the report');
    assert.ok(!/\b(src|href)\s*=\s*["']?(https?:)?\/\//i.test(text), 'nothing loaded from anywhere');
    assert.doesNotMatch(text, /<script/i);

    if (!existsSync(CHROMIUM)) {
      t.skip(`${CHROMIUM} is absent: install Debian's chromium (apt-get install chromium) to render the report`);
      return;
    }
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], timeout: 30_000 });
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      const requested: string[] = [];
      await page.route('**/*', (route) => {
        const url = route.request().url();
        if (url.startsWith('file:')) return route.continue();
        requested.push(url);
        return route.abort();
      });
      await page.goto(pathToFileURL(html).href, { timeout: 15_000 });
      assert.deepEqual(requested, [], 'the page asked for nothing over the network');
      assert.match((await page.locator('.verdict').textContent()) ?? '', /^Findings/);
      assert.equal(
        await page.locator('.card').count(),
        3,
        'two prompt-cache findings (both pairs), one noisy-neighbour',
      );
      assert.equal(await page.locator('svg.plot').count(), 3, 'a TTFT plot per tenant pair and the latency plot');
      const scenarioRows = await page.locator('table').first().locator('tr').count();
      assert.equal(scenarioRows, 8, 'header + 7 scenarios');
      const plotBox = await page.locator('svg.plot').first().boundingBox();
      assert.ok(plotBox !== null && plotBox.width > 400 && plotBox.height > 200, 'the plot is laid out');
      const shot = join(dir, 'report.png');
      await page.screenshot({ path: shot, fullPage: true });
      assert.ok(readFileSync(shot).byteLength > 10_000, 'a screenshot with content');
      process.stdout.write(`# screenshot: ${shot}\n`);
    } finally {
      await browser.close();
    }
  });
});
