// memtrace's speedscope files in the real speedscope app (npm's `speedscope`, its built static
// app) in headless Chromium: each file memtrace writes must load without an error, show its
// profile's name, draw a flame chart, and list in speedscope's Sandwich table, for every frame,
// the total and self bytes the file's weights give, formatted as bytes; a profile per device.
// A file with a deliberate mistake must be refused by the same harness, or the test is blind.
//
//   node speedscope_test.mjs --memtrace BIN/memtrace --data cli/analysis/tests/data --modules DIR
// Exit 0: all pass; 1: a failure (each named on stderr).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Browser, serve } from './run_page.mjs';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['memtrace', 'data', 'modules']) {
  if (!opt[k]) {
    console.error('usage: node speedscope_test.mjs --memtrace BIN --data DIR --modules NODE_MODULES');
    process.exit(2);
  }
}

// name -> memtrace flamegraph arguments (the snapshot is in --data).
const CASES = {
  torch_oom_short: ['torch_oom_p4.pickle'],
  torch_oom_all_frames: ['--frames', 'all', 'torch_oom_p4.pickle'],
  torch_step_peak_two_devices: ['--at', 'peak', 'torch_step_p5.pickle'],
  memtrace_leak: ['mt_leak.pickle'],
  nothing_live: ['mt_nccl.pickle'],  // two devices, nothing left at the end: empty profiles
};

const failures = [];
function check(cond, what) {
  if (!cond) failures.push(what);
  return cond;
}

// How speedscope 1.25 shows a weight in bytes (under 1024 "N B", else KB, MB or GB of 1024 with
// two decimals), to compare its table with the file's weights digit for digit.
function bytesText(v) {
  if (v < 1024) return `${v.toFixed(0)} B`;
  v /= 1024;
  if (v < 1024) return `${v.toFixed(2)} KB`;
  v /= 1024;
  if (v < 1024) return `${v.toFixed(2)} MB`;
  return `${(v / 1024).toFixed(2)} GB`;
}

// Per frame of one profile: the bytes of the samples it is in (once per sample) and of those it
// ends, keyed by what the Sandwich table shows of it (name and file).
function expectedRows(file, profile) {
  const rows = new Map();
  profile.samples.forEach((sample, i) => {
    const w = profile.weights[i];
    for (const f of new Set(sample)) {
      const fr = file.shared.frames[f];
      const key = `${fr.name}\u0000${fr.file || ''}`;
      const r = rows.get(key) || { total: 0, self: 0 };
      r.total += w;
      if (f === sample[sample.length - 1]) r.self += w;
      rows.set(key, r);
    }
  });
  return rows;
}

const LOADED = (name) => `document.body.innerText.includes(${JSON.stringify(name)}) ||
  document.body.innerText.includes('Something went wrong')`;

// The Sandwich view's table (one row per frame: total, self, name; the file as its title) and the
// profile list the toolbar opens (one row per profile: #, name, total weight).
async function tables(p) {
  return p.evaluate(() => {
    const cut = (s) => s.replace(/ \(.*$/, '');
    const isList = (tr) => [...tr.closest('table').querySelectorAll('th')].some((th) => th.textContent === 'Total Weight');
    const rows = [...document.querySelectorAll('table tr')].filter((tr) => tr.cells.length === 3 && tr.cells[0].tagName === 'TD');
    return {
      frames: rows.filter((tr) => !isList(tr)).map((tr) => ({
        total: cut(tr.cells[0].textContent), self: cut(tr.cells[1].textContent),
        name: tr.cells[2].textContent, file: tr.cells[2].getAttribute('title') || '',
      })),
      profiles: rows.filter(isList).map((tr) => ({ name: tr.cells[1].textContent, total: tr.cells[2].textContent })),
    };
  });
}

// The table draws its rows on later frames (it lays out what is in view first): wait for as many as
// the check below needs, rather than read them as soon as the header is there.
async function sandwichRows(p, atLeast) {
  await p.page.getByText('Sandwich').click();
  await p.waitFor(() => [...document.querySelectorAll('th')].some((th) => th.textContent.includes('Symbol Name')));
  await p.waitFor((n) => [...document.querySelectorAll('table tr')].filter((tr) => tr.cells.length === 3 &&
    tr.cells[0].tagName === 'TD').length >= n, atLeast).catch(() => {});
  return (await tables(p)).frames;
}

async function checkProfile(p, name, file, k) {
  const profile = file.profiles[k];
  const n = file.profiles.length;
  const shown = n > 1 ? `${profile.name} (${k + 1}/${n})` : profile.name;
  await p.waitFor((s) => document.body.innerText.includes(s), shown);
  check(profile.unit === 'bytes', `${name}: profile ${k} has unit ${profile.unit}`);
  const want = expectedRows(file, profile);
  const rows = await sandwichRows(p, Math.min(want.size, 20));
  // The table draws the rows in view only: every drawn row must be right, and enough be drawn.
  check(rows.length >= Math.min(want.size, 20), `${name}: profile ${k}: ${rows.length} rows drawn of ${want.size}`);
  for (const r of rows) {
    const w = want.get(`${r.name}\u0000${r.file}`);
    if (!check(w, `${name}: profile ${k}: speedscope lists a frame not in the file: ${r.name}`)) continue;
    check(r.total === bytesText(w.total) && r.self === bytesText(w.self),
      `${name}: profile ${k}: ${r.name}: speedscope shows total ${r.total}, self ${r.self}; ` +
      `the file gives ${bytesText(w.total)}, ${bytesText(w.self)}`);
  }
  await p.page.getByText('Time Order').click();
  const total = profile.weights.reduce((a, b) => a + b, 0);
  check(total === profile.endValue - profile.startValue, `${name}: profile ${k}: weights ${total} != endValue`);
  if (total > 0) {
    // The flame chart (a WebGL canvas, so read from the screen): bars of several colours.
    // Drawn on the next frames after the view switch: wait for it (a loaded machine is slow), a
    // minute at most, rather than read it at once.
    const drawn = (px) => px.colours >= 8 && px.inked > 0.02;
    let px = await p.pixels('canvas');
    for (const until = Date.now() + 60000; !drawn(px) && Date.now() < until;) {
      await p.page.waitForTimeout(200);
      px = await p.pixels('canvas');
    }
    check(drawn(px), `${name}: profile ${k}: no flame chart drawn (${JSON.stringify(px)})`);
  }
}

// Each profile weighs what the folded output of its device weighs.
function checkAgainstFolded(name, args, file) {
  for (const profile of file.profiles) {
    const device = /^device (\d+):/.exec(profile.name)?.[1];
    if (!check(device !== undefined, `${name}: profile name ${profile.name} names no device`)) continue;
    const folded = execFileSync(opt.memtrace, ['flamegraph', '--device', device, ...args],
      { cwd: opt.data, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    const bytes = folded.split('\n').filter(Boolean).reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    check(bytes === profile.endValue, `${name}: ${profile.name}: ${profile.endValue} bytes, folded ${bytes}`);
  }
}

async function checkLoads(browser, origin, name, jsonPath) {
  const file = JSON.parse(fs.readFileSync(jsonPath, 'utf8'));
  const url = `${origin}/index.html#profileURL=${encodeURIComponent(`${origin}/profiles/${path.basename(jsonPath)}`)}`;
  const p = await browser.open(url, { until: LOADED(file.profiles[0].name) });
  try {
    const text = await p.evaluate(() => document.body.innerText);
    if (!check(!text.includes('Something went wrong'), `${name}: speedscope could not import the file`)) return;
    check(p.console.some((m) => m.text.includes('Importing as speedscope json file')),
      `${name}: speedscope did not read it as its own file format`);
    check(await p.evaluate(() => document.title) === `${file.name} - speedscope`, `${name}: page title`);
    if (file.profiles.length > 1) {
      // The toolbar's list of profiles, each with its total weight, as bytes.
      const listed = (await tables(p)).profiles;
      const want = file.profiles.map((pr) => ({ name: pr.name, total: bytesText(pr.endValue - pr.startValue) }));
      check(JSON.stringify(listed) === JSON.stringify(want),
        `${name}: speedscope's profile list ${JSON.stringify(listed)}, the file's ${JSON.stringify(want)}`);
    }
    for (let k = 0; k < file.profiles.length; k++) {
      if (k > 0) await p.page.keyboard.press('n');  // speedscope's key for the next profile
      await checkProfile(p, name, file, k);
    }
    check(p.errors.length === 0, `${name}: errors in the page:\n  ${p.errors.join('\n  ')}`);
  } finally {
    await p.close();
  }
}

// The same harness must see speedscope refuse a broken file (weights and samples disagree).
async function checkRefused(browser, origin, jsonPath) {
  const file = JSON.parse(fs.readFileSync(jsonPath, 'utf8'));
  const url = `${origin}/index.html#profileURL=${encodeURIComponent(`${origin}/profiles/${path.basename(jsonPath)}`)}`;
  const p = await browser.open(url, { until: LOADED(file.profiles[0].name) });
  try {
    const text = await p.evaluate(() => document.body.innerText);
    check(text.includes('Something went wrong'), 'broken file: speedscope did not refuse it (the test cannot fail)');
    check(p.console.some((m) => m.text.includes('samples.length')), 'broken file: not refused for its weights');
  } finally {
    await p.close();
  }
}

async function main() {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'memtrace-speedscope-'));
  const app = path.join(opt.modules, 'speedscope', 'dist', 'release');
  const srv = await serve({ '/': app, '/profiles/': work });
  const browser = await Browser.launch({ modules: opt.modules });
  const ssVersion = JSON.parse(fs.readFileSync(path.join(opt.modules, 'speedscope', 'package.json'))).version;
  console.log(`chromium ${browser.version()}, speedscope ${ssVersion}`);
  try {
    for (const [name, args] of Object.entries(CASES)) {
      const out = path.join(work, `${name}.speedscope.json`);
      execFileSync(opt.memtrace, ['flamegraph', '--format', 'speedscope', ...args, '-o', out],
        { cwd: opt.data, stdio: ['ignore', 'ignore', 'inherit'] });
      const before = failures.length;
      checkAgainstFolded(name, args, JSON.parse(fs.readFileSync(out, 'utf8')));
      await checkLoads(browser, srv.origin, name, out);
      console.log(`${failures.length === before ? 'ok  ' : 'FAIL'} ${name}`);
    }
    const good = JSON.parse(fs.readFileSync(path.join(work, 'torch_oom_short.speedscope.json'), 'utf8'));
    good.profiles[0].weights.pop();
    fs.writeFileSync(path.join(work, 'broken.speedscope.json'), JSON.stringify(good));
    const before = failures.length;
    await checkRefused(browser, srv.origin, path.join(work, 'broken.speedscope.json'));
    console.log(`${failures.length === before ? 'ok  ' : 'FAIL'} broken_file_refused`);
  } finally {
    await browser.close();
    await srv.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
  for (const f of failures) console.error(`FAIL: ${f}`);
  return failures.length ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => {
  console.error(`speedscope_test: ${e.stack || e.message}`);
  process.exit(1);
});
