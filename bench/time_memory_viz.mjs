// PyTorch's own viewer on the same file, for bench/bench_report.py: the page
// `_memory_viz.py trace_plot` writes, opened in headless Chromium with MemoryViz.js and d3 answered
// from disk (tests/browser/memory_viz_offline.mjs), timed from navigation until its Active Memory
// Timeline has drawn (its polygons are in the page), or until LIMIT seconds have passed.
//   node time_memory_viz.mjs --modules NODE_MODULES --memory-viz DIR --limit SECONDS PAGE.html
// Prints one line. One load: on large files one load is minutes.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Browser } from '../tests/browser/run_page.mjs';
import { offlineViewer } from '../tests/browser/memory_viz_offline.mjs';

const opt = { limit: '180' };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a.startsWith('--')) opt[a.slice(2)] = process.argv[++i];
  else opt.page = a;
}
const browser = await Browser.launch({ modules: opt.modules });
const off = offlineViewer({ memoryViz: path.join(opt['memory-viz'], 'MemoryViz.js'), modules: opt.modules });
const limitMs = Number(opt.limit) * 1000;
const t0 = Date.now();
let line;
try {
  const p = await browser.open(pathToFileURL(path.resolve(opt.page)).href, {
    before: (page) => off.attach(page), timeout: limitMs,
    until: () => document.querySelectorAll('polygon').length > 0,
  });
  const ms = Date.now() - t0;
  const polygons = await p.evaluate(() => document.querySelectorAll('polygon').length);
  line = `PyTorch's viewer (MemoryViz.js from Debian's PyTorch, offline): first draw ${(ms / 1000).toFixed(2)} s ` +
    `after navigation (one load; ${polygons} polygons)${p.errors.length ? `, errors: ${p.errors.slice(0, 2).join('; ')}` : ''}`;
} catch (e) {
  line = `PyTorch's viewer (MemoryViz.js from Debian's PyTorch, offline): no first draw within ${opt.limit} s ` +
    `(${String(e.message).split('\n')[0]})`;
} finally {
  await browser.close().catch(() => {});
}
console.log(line);
