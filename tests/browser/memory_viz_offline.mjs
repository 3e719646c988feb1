// PyTorch's viewer (MemoryViz.js, the page `python -m torch.cuda._memory_viz trace_plot` writes)
// opened with no network: the page imports MemoryViz.js from jsDelivr and MemoryViz.js imports d3 5
// from Skypack. Those requests are answered here, the way those CDNs answer them, from what is on
// disk: MemoryViz.js as scripts/fetch-memory-viz.sh fetched it, and d3's ES modules from npm
// (tests/browser/package.json), with their bare imports rewritten to URLs as Skypack rewrites them.
// Every other request leaving the machine is refused and listed, so a test can require none.
//
//   const off = offlineViewer({memoryViz: 'build/memory_viz/MemoryViz.js', modules});
//   await off.attach(page)       // before page.goto
//   off.external                 // requests that tried to leave the machine
//   off.served                   // CDN URLs answered from disk
//
// One deviation, stated: MemoryViz.js 2.6 asks for d3-axis@1, d3-scale@1, d3-zoom@1 and d3-brush@1
// beside d3@5; all are answered with the versions d3 5.16.0 depends on (the same APIs), so the page
// runs one d3-selection, as it does when Skypack dedupes them.
import fs from 'node:fs';
import path from 'node:path';

const MEMORY_VIZ_URL = /^https:\/\/cdn\.jsdelivr\.net\/gh\/pytorch\/pytorch@[^/]+\/torch\/utils\/viz\/MemoryViz\.js$/;
const SKYPACK = 'https://cdn.skypack.dev/';
const MODULE_PREFIX = `${SKYPACK}-/`;  // our own paths: https://cdn.skypack.dev/-/PACKAGE/FILE

// The ES module entry of an npm package ("module" in its package.json).
function moduleEntry(modules, pkg) {
  const meta = JSON.parse(fs.readFileSync(path.join(modules, pkg, 'package.json'), 'utf8'));
  const entry = meta.module || meta['jsnext:main'];
  if (!entry) throw new Error(`${pkg} has no ES module entry`);
  return entry.replace(/^\.\//, '');
}

// Specifiers as a bundler reads them, made URLs a browser can load: bare ones (`from "d3-array"`)
// name the package's ES entry; relative ones without an extension (`from "./band"`, d3 5's style)
// get the file's `.js` or the folder's `/index.js`.
function rewriteImports(source, modules, dir) {
  return source.replace(/(\bfrom\s*|\bimport\s*)(["'])([^"']+)\2/g, (all, kw, q, spec) => {
    if (spec.startsWith('.')) {
      const full = path.resolve(dir, spec);
      if (fs.existsSync(full) && fs.statSync(full).isFile()) return all;
      if (fs.existsSync(`${full}.js`)) return `${kw}${q}${spec}.js${q}`;
      if (fs.existsSync(path.join(full, 'index.js'))) return `${kw}${q}${spec}/index.js${q}`;
      return all;
    }
    if (/^[a-z]+:/.test(spec) || spec.startsWith('/')) return all;
    const parts = spec.split('/');
    const pkg = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
    const rest = spec.slice(pkg.length + 1);
    const file = rest ? (rest.endsWith('.js') ? rest : `${rest}.js`) : moduleEntry(modules, pkg);
    return `${kw}${q}${MODULE_PREFIX}${pkg}/${file}${q}`;
  });
}

export function offlineViewer({ memoryViz, modules }) {
  const state = { external: [], served: [] };
  // A CDN's answer: module scripts load cross-origin (from a file:// page too) only with CORS.
  const js = (route, body) => route.fulfill({
    status: 200, contentType: 'text/javascript', body, headers: { 'access-control-allow-origin': '*' },
  });
  async function handle(route) {
    const url = route.request().url();
    if (url.startsWith('http://127.0.0.1') || url.startsWith('data:') || url.startsWith('file:')) {
      return route.continue();
    }
    if (MEMORY_VIZ_URL.test(url)) {
      state.served.push(url);
      return js(route, fs.readFileSync(memoryViz, 'utf8'));
    }
    if (url.startsWith(MODULE_PREFIX)) {
      const rel = url.slice(MODULE_PREFIX.length).split('?')[0];
      const full = path.resolve(modules, rel);
      if (full.startsWith(path.resolve(modules) + path.sep) && fs.existsSync(full)) {
        state.served.push(url);
        return js(route, rewriteImports(fs.readFileSync(full, 'utf8'), modules, path.dirname(full)));
      }
    } else if (url.startsWith(SKYPACK)) {
      // https://cdn.skypack.dev/d3@5, /d3-zoom@1, ...: the package's ES entry.
      const m = /^https:\/\/cdn\.skypack\.dev\/((?:@[^/@]+\/)?[^/@]+)(?:@[^/?]*)?(?:\?.*)?$/.exec(url);
      if (m && fs.existsSync(path.join(modules, m[1], 'package.json'))) {
        state.served.push(url);
        const target = `${MODULE_PREFIX}${m[1]}/${moduleEntry(modules, m[1])}`;
        return js(route, `export * from "${target}";\n`);
      }
    }
    state.external.push(url);
    return route.abort('blockedbyclient');
  }
  return {
    get external() { return state.external; },
    get served() { return state.served; },
    attach: (page) => page.route('**/*', handle),
  };
}
