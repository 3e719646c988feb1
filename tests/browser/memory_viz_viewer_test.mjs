// memtrace's snapshots in PyTorch's own viewer: the page `_memory_viz.py trace_plot` writes (from
// Debian's PyTorch, scripts/fetch-memory-viz.sh) running PyTorch's MemoryViz.js in headless Chromium,
// with no request leaving the machine (memory_viz_offline.mjs answers the CDNs' from disk).
//
// Files: a run of tests/process/nvtx_ranges.c on the simulated device (NVTX ranges on two threads,
// a marker, so `annotate` entries, `ranges`, `user_metadata` and `external_annotations`), the leak
// example, and `memtrace merge` of a PyTorch-shaped snapshot carrying newer PyTorch's keys with
// memtrace's side. For each, on device 0:
//   - Active Memory Timeline: drawn with no page error; one polygon per allocation the viewer's own
//     rules find in the file (counted here by python3's pickle, independently of memtrace), plus its
//     "summarized" band and its minimap's outline; hovering the largest shows its address;
//   - Allocator State History: one line per trace event (after the viewer folds adjacent
//     free_requested/free_completed), the `annotate` markers among them.
// A screenshot of each view is kept under OUT/. A file whose entry has no `addr` (which this viewer
// cannot draw) must fail the same checks, or the harness is blind.
//
//   node memory_viz_viewer_test.mjs --memtrace BIN --python PY --memory-viz DIR --programs DIR
//        --examples DIR --data DIR --modules NODE_MODULES --out DIR
// Exit 0: all pass; 1: a failure (each named on stderr); 77: MemoryViz.js was not fetched.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Browser } from './run_page.mjs';
import { offlineViewer } from './memory_viz_offline.mjs';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['memtrace', 'python', 'memory-viz', 'programs', 'examples', 'data', 'modules', 'out']) {
  if (!opt[k]) {
    console.error(`memory_viz_viewer_test: --${k} is required`);
    process.exit(2);
  }
}
const vizJs = path.join(opt['memory-viz'], 'MemoryViz.js');
const vizPy = path.join(opt['memory-viz'], '_memory_viz.py');
if (!fs.existsSync(vizJs) || !fs.existsSync(vizPy)) {
  const why = `${vizJs} or _memory_viz.py is not there (scripts/fetch-memory-viz.sh fetches them)`;
  if (process.env.CI === 'true' || process.env.MEMTRACE_REQUIRE_BROWSER === '1') {
    console.error(`FAIL: ${why}; CI=true or MEMTRACE_REQUIRE_BROWSER=1: this test may not skip`);
    process.exit(1);
  }
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
fs.mkdirSync(opt.out, { recursive: true });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'memtrace-viewer-'));

// What the viewer should draw for device 0, by its rules, from the pickle itself.
const EXPECT = String.raw`
import json, pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
trace = s['device_traces'][0] if s['device_traces'] else []
events, live, elements = [], set(), 0
for e in trace:
    if (e['action'] == 'free_completed' and events and events[-1]['action'] == 'free_requested'
            and events[-1].get('addr') == e.get('addr')):
        events[-1] = dict(events[-1], action='free')
        continue
    events.append(e)
for e in events:
    if e['action'] == 'alloc':
        elements += 1; live.add(e['addr'])
    elif e['action'] in ('free', 'free_completed'):
        if e['addr'] in live: live.discard(e['addr'])
        else: elements += 1
for seg in s['segments']:
    if seg['device'] == 0:
        elements += sum(1 for b in seg['blocks'] if b['state'] == 'active_allocated' and b['address'] not in live)
allocs = [e for e in events if e['action'] == 'alloc']
big = max(allocs, key=lambda e: e['size']) if allocs else None
print(json.dumps({'polygons': elements + 2, 'events': len(events),
                  'annotate': sum(1 for e in events if e['action'] == 'annotate'),
                  'largest': None if big is None else {'addr': '%x' % big['addr'], 'size': big['size']}}))
`;

const failures = [];
const check = (cond, what) => {
  if (!cond) failures.push(what);
  return cond;
};
const run = (cmd, args, env = {}) => execFileSync(cmd, args, { env: { ...process.env, ...env }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

function memtraceRun(name, program) {
  const out = path.join(work, `${name}.pickle`);
  run(opt.memtrace, ['run', '--sim', '--no-summary', '-o', out, '--', program]);
  return out;
}

const files = {
  nvtx_ranges: memtraceRun('nvtx_ranges', path.join(opt.programs, 'nvtx_ranges')),
  leak: memtraceRun('leak', path.join(opt.examples, 'leak')),
};
files.merged_newer_keys = path.join(work, 'merged_newer_keys.pickle');
run(opt.memtrace, ['merge', path.join(opt.data, 'torch_newer_keys_p4.pickle'), path.join(opt.data, 'memtrace_step.pickle'),
  '-o', files.merged_newer_keys]);
// The control: an entry without `addr`, which MemoryViz.js's event list cannot format.
files.control_no_addr = path.join(work, 'control_no_addr.pickle');
run(opt.python, ['-c', `import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
del s['device_traces'][0][0]['addr']
pickle.dump(s, open(sys.argv[2], 'wb'), protocol=4)`, files.leak, files.control_no_addr]);

const browser = await Browser.launch({ modules: opt.modules });
const VIEW_READY = `document.querySelectorAll('polygon').length > 0 || document.querySelectorAll('pre').length > 1`;

// One file in both views: what the viewer drew, and the screenshots.
async function look(name, file) {
  const want = JSON.parse(run(opt.python, ['-c', EXPECT, file]));
  const html = path.join(work, `${name}.html`);
  run(opt.python, [vizPy, 'trace_plot', file, '-o', html]);
  const off = offlineViewer({ memoryViz: vizJs, modules: opt.modules });
  const problems = [];
  const p = await browser.open(pathToFileURL(html).href, { before: (page) => off.attach(page) });
  try {
    await p.waitFor(VIEW_READY).catch(() => problems.push('the Active Memory Timeline never drew'));
    const polygons = await p.evaluate(() => document.querySelectorAll('polygon').length);
    if (polygons !== want.polygons) problems.push(`timeline: ${polygons} polygons, the file makes ${want.polygons} (allocations, summarized, minimap)`);
    if (want.largest) {
      // The largest allocation: hover the polygon whose context names its address.
      const text = await p.evaluate((w) => {
        for (const poly of document.querySelectorAll('polygon')) {
          poly.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
          const t = document.body.innerText;
          if (t.includes(`Addr: b${w.addr}_`)) return t;
        }
        return '';
      }, want.largest);
      if (!text) problems.push(`no polygon's context names the largest allocation b${want.largest.addr}`);
    }
    await p.page.screenshot({ path: path.join(opt.out, `${name}_timeline.png`) });
    // The same file in the Allocator State History view.
    await p.page.selectOption('select:nth-of-type(2)', 'Allocator State History');
    const ACTIONS = /^(alloc|free|free_requested|free_completed|segment_alloc|segment_free|segment_map|segment_unmap|annotate|snapshot|OOM)\b/;
    await p.waitFor(() => [...document.querySelectorAll('pre')].length > 1).catch(() => problems.push('the state history never drew'));
    const lines = await p.evaluate((re) => [...document.querySelectorAll('pre')].map((e) => e.textContent)
      .filter((t) => new RegExp(re).test(t)), ACTIONS.source);
    if (lines.length !== want.events) problems.push(`state history: ${lines.length} event lines, the file has ${want.events}`);
    const marks = lines.filter((t) => t.startsWith('annotate')).length;
    if (marks !== want.annotate) problems.push(`state history: ${marks} annotate lines, the file has ${want.annotate}`);
    await p.page.screenshot({ path: path.join(opt.out, `${name}_state_history.png`) });
  } finally {
    await p.close();
  }
  problems.push(...p.errors, ...off.external.map((u) => `a request left the machine: ${u}`));
  if (off.served.length === 0) problems.push('MemoryViz.js was never asked for');
  return { problems, want };
}

try {
  for (const [name, file] of Object.entries(files)) {
    const { problems, want } = await look(name, file);
    if (name.startsWith('control_')) {
      check(problems.some((pr) => pr.startsWith('uncaught:')),
        `${name}: the viewer showed a file it cannot format without an uncaught error; the harness is blind (${problems})`);
      console.log(`${name}: refused as expected (${problems[0]})`);
      continue;
    }
    for (const pr of problems) check(false, `${name}: ${pr}`);
    if (!problems.length) console.log(`${name}: ${want.polygons} polygons, ${want.events} events, ${want.annotate} annotate`);
  }
  check(JSON.parse(run(opt.python, ['-c', EXPECT, files.nvtx_ranges])).annotate > 0, 'nvtx_ranges: no annotate entry to show');
} finally {
  await browser.close();
  fs.rmSync(work, { recursive: true, force: true });
}
for (const f of failures) console.error(`FAIL: ${f}`);
console.log(failures.length ? `${failures.length} failure(s)` : 'all files open in PyTorch\'s viewer');
process.exit(failures.length ? 1 : 0);
