// Opens an assembled report page in headless Chromium and checks what it draws against its data.
//
//   node page_test.mjs --page PAGE.html --out DIR --chromium PATH [--name NAME]
//
// Fails on any console error, any uncaught exception and any network request (the page must make
// none); checks that each section renders, that the figures the page shows (its data-* attributes)
// equal the data's, that a click on the chart selects another moment and redraws the live set,
// that zooming switches the level of detail; saves a screenshot per section under DIR, and prints
// one JSON line of results (with the time from navigation to the first draw) on stdout.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function args() {
  const a = process.argv.slice(2);
  const out = {};
  for (let i = 0; i < a.length; i += 2) out[a[i].replace(/^--/, '')] = a[i + 1];
  if (!out.page || !out.out || !out.chromium) {
    console.error('usage: node page_test.mjs --page PAGE.html --out DIR --chromium PATH [--name NAME]');
    process.exit(2);
  }
  return out;
}

const opt = args();
const name = opt.name || 'page';
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); };
const eq = (got, want, what) => check(got === want, `${what}: page shows ${got}, data says ${want}`);
mkdirSync(opt.out, { recursive: true });

const browser = await chromium.launch({ executablePath: opt.chromium, args: ['--disable-gpu', '--no-first-run'] });
const result = { name };
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  const url = pathToFileURL(resolve(opt.page)).href;
  const consoleErrors = [];
  const requests = [];
  const warnings = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
    // The test's own canvas readbacks make Chromium suggest willReadFrequently; anything else is kept.
    else if (m.type() === 'warning' && !/willReadFrequently/.test(m.text())) warnings.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  page.on('request', (r) => { if (r.url() !== url) requests.push(r.url()); });

  const started = Date.now();
  await page.goto(url, { waitUntil: 'load', timeout: 120000 });
  await page.waitForFunction(() => window.MEMTRACE_READY === true, null, { timeout: 120000 });
  result.wall_ms = Date.now() - started;
  result.timing = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    return { ready_ms: Math.round(window.MEMTRACE_TIMING.ready_ms), script_ms: Math.round(window.MEMTRACE_TIMING.script_ms), sections: window.MEMTRACE_TIMING.sections,
      dom_content_loaded_ms: nav ? Math.round(nav.domContentLoadedEventEnd) : null, error: window.MEMTRACE_TIMING.error || null };
  });
  check(!result.timing.error, `the page reports an error: ${result.timing.error}`);

  // The header.
  const header = await page.evaluate(() => {
    const R = window.MEMTRACE_REPORT;
    const h = document.getElementById('header');
    return {
      text: h.textContent, exe: R.header.exe, truncated: h.querySelector('[data-truncated]').dataset.truncated,
      wantTruncated: R.header.truncated ? 'true' : 'false',
      parts: h.querySelectorAll('.parts tbody tr').length, wantParts: (R.header.parts || []).length,
      settings: h.querySelectorAll('.settings tbody tr').length, wantSettings: (R.header.settings || []).length,
      tabs: document.querySelectorAll('#devices .tab').length, devices: R.devices.length,
    };
  });
  check(header.text.includes(header.exe), 'the header names the program');
  eq(header.truncated, header.wantTruncated, 'truncated');
  eq(header.parts, header.wantParts, 'merged parts listed');
  eq(header.settings, header.wantSettings, 'settings listed');
  eq(header.tabs, header.devices > 1 ? header.devices : 0, 'device tabs');

  // The first device's figures, as drawn, against the data.
  const figures = () => page.evaluate(() => {
    const R = window.MEMTRACE_REPORT;
    const root = document.querySelector('.device');
    const dev = R.devices.find((d) => String(d.device) === root.dataset.device);
    const num = (sel, attr) => { const e = root.querySelector(sel); return e ? Number(e.getAttribute(attr)) : null; };
    const tl = root.querySelector('.timeline');
    const canvas = tl && tl.querySelector('canvas');
    let inked = 0;
    if (canvas) {
      const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 3; i < px.length; i += 16) if (px[i] > 0) inked++;
    }
    const moment = root.querySelector('[data-section="moment"]');
    const mi = Number(moment.dataset.moment);
    const m = dev.moments[mi];
    const sumPairs = (p) => { let s = 0; for (let i = 1; i < p.length; i += 2) s += p[i]; return s; };
    const lv = moment.querySelector('.liveview');
    const leaks = root.querySelector('[data-section="leaks"]');
    const leakLv = leaks.querySelector('.liveview');
    const seg = root.querySelector('.segments');
    const layout = dev.layouts && dev.layouts[Number(seg.dataset.layout)];
    const segCanvas = seg.querySelector('canvas');
    let segInk = 0;
    if (segCanvas) {
      const px = segCanvas.getContext('2d').getImageData(0, 0, segCanvas.width, segCanvas.height).data;
      for (let i = 3; i < px.length; i += 16) if (px[i] > 0) segInk++;
    }
    return {
      device: dev.device,
      peakAllocated: [num('[data-peak-allocated-bytes]', 'data-peak-allocated-bytes'), dev.peak.allocated_bytes],
      peakReserved: [num('[data-peak-reserved-bytes]', 'data-peak-reserved-bytes'), dev.peak.reserved_bytes],
      endAllocated: [num('[data-end-allocated-bytes]', 'data-end-allocated-bytes'), dev.end.allocated_bytes],
      leakCard: [num('[data-leak-bytes]', 'data-leak-bytes'), dev.leaks.bytes],
      ooms: [num('[data-ooms]', 'data-ooms'), (dev.ooms || []).length],
      chartInk: inked,
      chartMaxAllocated: [Number(tl.dataset.maxAllocatedBytes), dev.peak.allocated_bytes],
      level: Number(tl.dataset.level), levels: Number(tl.dataset.levels), visible: Number(tl.dataset.visiblePoints),
      zoomed: tl.dataset.zoomed,
      moment: mi, momentT: m.t,
      momentAllocated: [Number(moment.dataset.allocatedBytes), m.allocated_bytes],
      liveTotal: [Number(lv.dataset.totalBytes), m.allocated_bytes],
      liveSum: [sumPairs(m.live[lv.dataset.kind]), m.allocated_bytes],
      liveKind: lv.dataset.kind,
      frames: lv.querySelectorAll('g.frame').length,
      firstFrames: Array.from(lv.querySelectorAll('g.frame')).slice(0, 40).map((g) => g.getAttribute('name')).join('|'),
      topRows: [lv.querySelectorAll('table.top tbody tr').length, (m.top || []).length],
      ownerBar: [Array.from(moment.querySelectorAll('.ob-part')).reduce((s, e) => s + Number(e.dataset.bytes), 0), (m.by_owner || []).reduce((s, b) => s + b, 0)],
      leakTotal: leakLv ? [Number(leakLv.dataset.totalBytes), dev.leaks.bytes] : [0, dev.leaks.bytes],
      leakFrames: leakLv ? leakLv.querySelectorAll('g.frame').length : 0,
      layouts: (dev.layouts || []).length,
      segments: layout ? [Number(seg.dataset.segments), layout.segments.length] : null,
      segAllocated: layout ? [Number(seg.dataset.drawnAllocatedBytes), layout.allocated_bytes, layout.segments_omitted || 0] : null,
      segLargest: layout ? [Number(seg.dataset.largestFreeBlockBytes), layout.largest_free_block_bytes] : null,
      segInk, rowsDrawn: Number(seg.dataset.rowsDrawn || 0),
      verdicts: seg.querySelectorAll('.verdict').length,
    };
  });

  let f = await figures();
  result.device = f.device;
  for (const k of ['peakAllocated', 'peakReserved', 'endAllocated', 'leakCard', 'ooms', 'chartMaxAllocated', 'momentAllocated', 'liveTotal', 'liveSum', 'topRows', 'ownerBar', 'leakTotal']) eq(f[k][0], f[k][1], k);
  check(f.chartInk > 1000, `the chart's canvas is blank (${f.chartInk} inked samples)`);
  check(f.visible <= 4000 || f.level === 0, `the chart draws ${f.visible} points at level ${f.level}`);
  check(f.frames > 3, `the live set's flame graph has ${f.frames} frames`);
  check(f.leakTotal[1] === 0 || f.leakFrames > 1, 'the leaks flame graph is drawn');
  if (f.segments) {
    eq(f.segments[0], f.segments[1], 'segments in the layout');
    if (f.segAllocated[2] === 0) eq(f.segAllocated[0], f.segAllocated[1], 'allocated bytes in the layout');
    eq(f.segLargest[0], f.segLargest[1], 'largest free block');
    check(f.segInk > 1000 && f.rowsDrawn > 0, 'the segments canvas is blank');
  }
  result.first_view = { level: f.level, levels: f.levels, visible_points: f.visible, frames: f.frames, nodes_drawn: f.frames };

  // Stack filter: all frames.
  await page.click('.device [data-section="moment"] .liveview button[data-kind="all"]');
  const allView = await page.evaluate(() => {
    const lv = document.querySelector('.device [data-section="moment"] .liveview');
    return { kind: lv.dataset.kind, total: Number(lv.dataset.totalBytes), frames: lv.querySelectorAll('g.frame').length };
  });
  eq(allView.kind, 'all', 'stack filter switch');
  eq(allView.total, f.liveTotal[1], 'live total with all frames');
  check(allView.frames > 3, 'the all-frames flame graph is drawn');
  await page.click('.device [data-section="moment"] .liveview button[data-kind="short"]');

  // Screenshots of each section (after the first draw, before any interaction moves them).
  const shots = [];
  const shoot = async (sel, file) => {
    const e = await page.$(sel);
    if (!e) { failures.push(`no element ${sel} to photograph`); return; }
    await e.screenshot({ path: `${opt.out}/${file}` });
    shots.push(file);
  };
  await shoot('.page-head', 'header.png');
  await shoot('.device .cards', 'cards.png');
  await shoot('.device [data-section="timeline"]', 'timeline.png');
  await shoot('.device [data-section="moment"]', 'moment.png');
  await shoot('.device [data-section="leaks"]', 'leaks.png');
  await shoot('.device [data-section="segments"]', 'segments.png');
  await page.screenshot({ path: `${opt.out}/page.png`, fullPage: true });
  shots.push('page.png');
  result.screenshots = shots;

  // Hovering the chart reads out that point; hovering a segment describes it.
  {
    const o = await page.$('.device .timeline .u-over');
    await o.scrollIntoViewIfNeeded();
    const b = await o.boundingBox();
    await page.mouse.move(b.x + b.width * 0.3, b.y + b.height * 0.5);
    const ro = await page.evaluate(() => ({
      where: (document.querySelector('.device .readout .ro-where') || {}).textContent,
      values: Array.from(document.querySelectorAll('.device .legend .lg-value')).map((e) => e.textContent),
      split: document.querySelector('.device .timeline').dataset.split,
    }));
    check(ro.where && !ro.where.startsWith('selected'), `hovering the chart reads out the point under the cursor (${ro.where})`);
    check(ro.split !== 'true' || ro.values.every((v) => v !== ''), 'hovering the chart gives each owner its bytes');
    const sc = await page.$('.device .segments canvas');
    if (sc) {
      await sc.scrollIntoViewIfNeeded();
      const sb = await sc.boundingBox();
      await page.mouse.move(sb.x + sb.width * 0.5, sb.y + 8);
      check(await page.evaluate(() => !document.querySelector('.device .segments .tip').hidden), 'hovering a segment describes it');
    }
  }

  // A click on the chart selects the nearest moment and redraws the live set.
  const over = await page.$('.device .timeline .u-over');
  await over.scrollIntoViewIfNeeded();
  const box = await over.boundingBox();
  const before = f;
  // Where to click: over the moment farthest in time from the one shown (left of it when there
  // is one), so that a history with long gaps between its events still has another moment nearest.
  const target = await page.evaluate(() => {
    const R = window.MEMTRACE_REPORT;
    const root = document.querySelector('.device');
    const dev = R.devices.find((d) => String(d.device) === root.dataset.device);
    const tl = root.querySelector('.timeline');
    const cur = dev.moments[Number(root.querySelector('[data-section="moment"]').dataset.moment)];
    const lo = Number(tl.dataset.xMin), hi = Number(tl.dataset.xMax);
    let best = null;
    for (const m of dev.moments) {
      if (m.t < lo || m.t > hi || m.t === cur.t) continue;
      const score = (m.t < cur.t ? 1e18 : 0) + Math.abs(m.t - cur.t);
      if (!best || score > best.score) best = { score, t: m.t };
    }
    return best ? { frac: (best.t - lo) / Math.max(hi - lo, 1), left: best.t < cur.t } : null;
  });
  check(target !== null, 'the history has a second moment to click on');
  const frac = target ? Math.min(0.995, Math.max(0.005, target.frac)) : 0.12;
  await page.mouse.click(box.x + box.width * frac, box.y + box.height * 0.5);
  await page.waitForFunction((mi) => document.querySelector('.device [data-section="moment"]').dataset.moment !== String(mi), before.moment, { timeout: 10000 }).catch(() => {});
  f = await figures();
  check(f.moment !== before.moment, 'a click on the chart selects another moment');
  if (target && target.left) check(f.momentT < before.momentT, 'the moment selected is left of the peak, where the click was');
  eq(f.liveTotal[0], f.liveTotal[1], 'live total after the click');
  check(f.firstFrames !== before.firstFrames, 'the flame graph is redrawn for the new moment');

  // The chart split by the largest stacks at the peak, and back by owner.
  if (await page.$('.device button[data-split-by="stack"]')) {
    await page.click('.device button[data-split-by="stack"]');
    const split = await page.evaluate(() => {
      const R = window.MEMTRACE_REPORT;
      const root = document.querySelector('.device');
      const dev = R.devices.find((d) => String(d.device) === root.dataset.device);
      const names = [...root.querySelectorAll('.legend .lg-name')].map((e) => e.textContent);
      return { names, groups: (dev.stack_groups || []).map((g) => g.label) };
    });
    check(split.groups.every((g) => split.names.includes(g)), `split by stack: the legend names ${JSON.stringify(split.names)}`);
    await page.click('.device button[data-split-by="owner"]');
    check(await page.evaluate(() => !!document.querySelector('.device .timeline canvas')), 'split by owner again: the chart is drawn');
  }
  // A file with ranges: the chart split by range stack names the ranges live at the moment.
  if (await page.$('.device button[data-split-by="range"]')) {
    await page.click('.device button[data-split-by="range"]');
    const split = await page.evaluate(() => {
      const R = window.MEMTRACE_REPORT;
      const root = document.querySelector('.device');
      const dev = R.devices.find((d) => String(d.device) === root.dataset.device);
      const m = dev.moments[Number(root.querySelector('[data-section="moment"]').dataset.moment)];
      const names = [...root.querySelectorAll('.legend .lg-name')].map((e) => e.textContent);
      const live = (m.by_range || []).map((b, g) => (b > 0 ? R.ranges[g] : null)).filter((n) => n !== null);
      return { names, live, split: root.querySelector('.timeline-box').dataset.splitBy };
    });
    check(split.split === 'range', 'split by range: the chart is redrawn');
    check(split.live.length > 0 && split.live.every((n) => split.names.includes(n)),
      `split by range: the legend ${JSON.stringify(split.names)} names the ranges live at the moment ${JSON.stringify(split.live)}`);
    await page.click('.device button[data-split-by="owner"]');
  }

  // Zoom: a drag selects a narrow window, the level of detail follows, a double-click resets.
  await page.mouse.move(box.x + box.width * 0.60, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.605, box.y + box.height * 0.5, { steps: 4 });
  await page.mouse.move(box.x + box.width * 0.61, box.y + box.height * 0.5, { steps: 4 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector('.device .timeline').dataset.zoomed === 'true', null, { timeout: 10000 }).catch(() => {});
  const zoomed = await figures();
  check(zoomed.zoomed === 'true', 'a drag zooms in');
  check(zoomed.level === zoomed.levels - 1 || zoomed.level > before.level, `zooming in switches to a finer level (level ${zoomed.level} of ${zoomed.levels})`);
  check(zoomed.visible <= 4000, `the zoomed chart draws ${zoomed.visible} points`);
  check(zoomed.chartInk > 1000, 'the zoomed chart is drawn');
  result.zoomed_view = { level: zoomed.level, visible_points: zoomed.visible };
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  await page.mouse.wheel(0, 300);
  await page.mouse.dblclick(box.x + box.width * 0.5, box.y + box.height * 0.5);
  await page.waitForFunction(() => document.querySelector('.device .timeline').dataset.zoomed === 'false', null, { timeout: 10000 }).catch(() => {});
  const reset = await figures();
  eq(reset.zoomed, 'false', 'a double-click resets the zoom');
  eq(reset.level, before.level, 'the level after the reset');
  await page.mouse.wheel(0, -400);
  await page.waitForFunction(() => document.querySelector('.device .timeline').dataset.zoomed === 'true', null, { timeout: 10000 }).catch(() => {});
  check((await figures()).zoomed === 'true', 'the wheel zooms in');

  // Each layout, and every other device.
  for (let i = 1; i < f.layouts; i++) {
    await page.click(`.device .segments button[data-layout="${i}"]`);
    const g = await figures();
    eq(g.segLargest[0], g.segLargest[1], `largest free block of layout ${i}`);
    check(g.verdicts > 0, `layout ${i} shows its verdict`);
  }
  const tabs = await page.$$('#devices .tab');
  result.devices_drawn = 1;
  for (let i = 0; i < tabs.length; i++) {
    await tabs[i].click();
    const g = await figures();
    for (const k of ['peakAllocated', 'liveTotal', 'leakTotal', 'chartMaxAllocated']) eq(g[k][0], g[k][1], `${k} of device ${g.device}`);
    check(g.chartInk > 1000, `the chart of device ${g.device} is drawn`);
    if (g.device < 0) await shoot('.device', 'pinned-host.png');
    result.devices_drawn++;
  }

  // A narrow window: the charts follow its width and the page does not scroll sideways.
  await page.setViewportSize({ width: 720, height: 900 });
  const narrow = await page.waitForFunction(() => {
    const c = document.querySelector('.device .timeline canvas');
    const svg = document.querySelector('.device [data-section="moment"] .lv-flame svg');
    const seg = document.querySelector('.device .segments canvas');
    const w = document.documentElement.clientWidth;
    const ok = c && c.getBoundingClientRect().width <= w && (!svg || Number(svg.getAttribute('width')) <= w) &&
      (!seg || seg.getBoundingClientRect().width <= w) && document.documentElement.scrollWidth <= w;
    return ok ? { chart: Math.round(c.getBoundingClientRect().width), page: document.documentElement.scrollWidth } : false;
  }, null, { timeout: 10000 }).then((h) => h.jsonValue()).catch(() => null);
  check(narrow !== null, 'at 720 pixels wide the charts fit and the page does not scroll sideways');
  await page.screenshot({ path: `${opt.out}/narrow.png`, fullPage: false });
  shots.push('narrow.png');

  check(consoleErrors.length === 0, `console: ${consoleErrors.slice(0, 5).join(' / ')}`);
  check(requests.length === 0, `network requests: ${requests.slice(0, 5).join(' ')}`);
  result.requests = requests.length;
  result.warnings = warnings;
  result.console_errors = consoleErrors.length;
  await context.close();
} catch (e) {
  failures.push(`driver: ${e && e.stack ? e.stack : e}`);
} finally {
  await browser.close();
}
result.failures = failures;
console.log(JSON.stringify(result));
process.exit(failures.length ? 1 : 0);
