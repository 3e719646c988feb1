// Pages in headless Chromium for the tests that check memtrace's files in the programs people
// read them with (tests/browser/README.md). Debian's /usr/bin/chromium, driven by playwright-core
// from the npm packages scripts/fetch-browser-deps.sh installed; no browser download.
//
// As a module:
//   const b = await Browser.launch({modules});              // modules: that node_modules folder
//   const srv = await serve({'/': dir, '/profile.json': file});  // http://127.0.0.1:PORT
//   const p = await b.open(url, {until: () => document.title !== ''});
//   p.errors      console errors, uncaught exceptions and failed requests, as lines
//   await p.evaluate(fn, arg), p.page (playwright's Page), await p.pixels(selector)
//   await p.close(); await b.close(); await srv.close();
// As a program, for a quick look at a page (a URL, or a local .html file):
//   node run_page.mjs --modules DIR URL|FILE [--until 'JS expression'] [--eval 'JS expression']
//   prints {"errors": [...], "result": ...} and exits 1 when there were errors.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const DEFAULT_CHROMIUM = '/usr/bin/chromium';
// How long a page may take to reach what is waited for: a guard against a page that never gets
// there, not a pace. 2-core machines under load start Chromium slowly.
export const WAIT_MS = 120000;

const TYPES = {
  '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.png': 'image/png', '.ico': 'image/x-icon', '.wasm': 'application/wasm',
  '.woff2': 'font/woff2', '.txt': 'text/plain',
};

// A static HTTP server on 127.0.0.1 (pages cannot fetch file:// URLs). routes maps a URL path to a
// file, or a path ending in '/' to a folder served under it. Resolves to {origin, close()}.
export async function serve(routes) {
  const server = http.createServer((req, res) => {
    const p = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
    let file = routes[p];
    if (!file) {
      const prefix = Object.keys(routes).filter((r) => r.endsWith('/') && p.startsWith(r))
        .sort((a, b) => b.length - a.length)[0];
      if (prefix !== undefined) {
        const rel = p.slice(prefix.length) || 'index.html';
        const full = path.resolve(routes[prefix], rel);
        if (full.startsWith(path.resolve(routes[prefix]) + path.sep)) file = full;
      }
    }
    fs.readFile(file || '', (err, data) => {
      if (err) {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found\n');
        return;
      }
      res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream' });
      res.end(data);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

export function loadPlaywright(modules) {
  const require = createRequire(path.join(path.resolve(modules), 'index.js'));
  return require('playwright-core');
}

export class Browser {
  constructor(browser) {
    this.browser = browser;
  }

  static async launch({ modules, executablePath = process.env.MEMTRACE_CHROMIUM || DEFAULT_CHROMIUM } = {}) {
    const { chromium } = loadPlaywright(modules);
    const args = [];
    // Chromium's sandbox needs user namespaces, which root in a container does not get.
    if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
    return new Browser(await chromium.launch({ executablePath, headless: true, args }));
  }

  version() {
    return this.browser.version();
  }

  // Opens url in a fresh page of a fixed size and waits until `until` (a function or expression
  // run in the page) is true. `before(page)` runs before the page loads (to route its requests).
  // Resolves to an OpenPage whose errors lists what went wrong so far.
  async open(url, { until, before, viewport = { width: 1280, height: 720 }, timeout = WAIT_MS } = {}) {
    const context = await this.browser.newContext({ viewport });
    context.setDefaultTimeout(timeout);
    const page = await context.newPage();
    const p = new OpenPage(context, page);
    page.on('console', (m) => {
      p.console.push({ type: m.type(), text: m.text() });
      if (m.type() === 'error') p.errors.push(`console error: ${m.text()}`);
    });
    page.on('pageerror', (e) => p.errors.push(`uncaught: ${e.message}`));
    page.on('requestfailed', (r) => p.errors.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
    page.on('response', (r) => {
      if (r.status() >= 400) p.errors.push(`HTTP ${r.status()}: ${r.url()}`);
    });
    if (before) await before(page);
    await page.goto(url, { timeout });
    if (until) await page.waitForFunction(until, undefined, { timeout, polling: 100 });
    return p;
  }

  close() {
    return this.browser.close();
  }
}

export class OpenPage {
  constructor(context, page) {
    this.context = context;
    this.page = page;
    this.console = [];  // every console message: {type, text}
    this.errors = [];
  }

  evaluate(fn, arg) {
    return this.page.evaluate(fn, arg);
  }

  waitFor(until, arg, timeout = WAIT_MS) {
    return this.page.waitForFunction(until, arg, { timeout, polling: 100 });
  }

  // What the screen shows inside the element (as a screenshot, so WebGL canvases count too):
  // {width, height, colours (distinct), inked (share of pixels unlike the top-left one)}.
  async pixels(selector) {
    const png = await this.page.locator(selector).first().screenshot({ type: 'png' });
    return this.page.evaluate(async (b64) => {
      const img = new Image();
      img.src = `data:image/png;base64,${b64}`;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.width;
      c.height = img.height;
      const ctx = c.getContext('2d');
      ctx.drawImage(img, 0, 0);
      const d = ctx.getImageData(0, 0, c.width, c.height).data;
      const seen = new Set();
      let inked = 0;
      for (let i = 0; i < d.length; i += 4) {
        const v = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
        seen.add(v);
        if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2]) inked++;
      }
      return { width: c.width, height: c.height, colours: seen.size, inked: inked / (d.length / 4) };
    }, png.toString('base64'));
  }

  close() {
    return this.context.close();
  }
}

async function main(argv) {
  const opt = { modules: null, until: null, evaluate: null, target: null };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--modules') opt.modules = argv[++i];
    else if (argv[i] === '--until') opt.until = argv[++i];
    else if (argv[i] === '--eval') opt.evaluate = argv[++i];
    else opt.target = argv[i];
  }
  if (!opt.modules || !opt.target) {
    console.error('usage: node run_page.mjs --modules NODE_MODULES URL|FILE [--until EXPR] [--eval EXPR]');
    return 2;
  }
  const url = /^[a-z]+:/.test(opt.target) ? opt.target : pathToFileURL(path.resolve(opt.target)).href;
  const browser = await Browser.launch({ modules: opt.modules });
  try {
    const p = await browser.open(url, { until: opt.until || undefined });
    const result = opt.evaluate ? await p.evaluate(opt.evaluate) : null;
    console.log(JSON.stringify({ chromium: browser.version(), errors: p.errors, result }));
    return p.errors.length ? 1 : 0;
  } finally {
    await browser.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] || '').href) {
  main(process.argv.slice(2)).then((rc) => process.exit(rc), (e) => {
    console.error(`run_page: ${e.message}`);
    process.exit(1);
  });
}
