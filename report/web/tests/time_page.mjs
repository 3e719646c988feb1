// The time from navigation to the report's first draw (window.MEMTRACE_TIMING.ready_ms), median of
// three loads in headless Chromium, for bench/bench_report.py:
//   node time_page.mjs PAGE.html
// Prints one line. Debian's /usr/bin/chromium (or $MEMTRACE_CHROMIUM).
import { chromium } from 'playwright-core';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const page_path = process.argv[2];
const browser = await chromium.launch({ executablePath: process.env.MEMTRACE_CHROMIUM || '/usr/bin/chromium',
  args: ['--disable-gpu', '--no-first-run'] });
const runs = [];
let errors = 0;
for (let i = 0; i < 3; i++) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  page.on('pageerror', () => errors++);
  page.on('console', (m) => { if (m.type() === 'error') errors++; });
  await page.goto(pathToFileURL(resolve(page_path)).href, { waitUntil: 'load', timeout: 120000 });
  await page.waitForFunction(() => window.MEMTRACE_READY === true, null, { timeout: 120000 });
  runs.push(await page.evaluate(() => window.MEMTRACE_TIMING.ready_ms));
  await context.close();
}
await browser.close();
runs.sort((a, b) => a - b);
console.log(`headless Chromium: first draw ${(runs[1] / 1000).toFixed(2)} s after navigation (median of 3: ` +
  `${runs.map((r) => (r / 1000).toFixed(2)).join(', ')} s)${errors ? `, ${errors} page errors` : ''} ` +
  `[${runs[1] < 3000 ? 'under' : 'OVER'} 3 s]`);
