#!/usr/bin/env python3
"""`memtrace report`'s pages in a real browser (ctest: browser_report_pages), on the files users
have: the leak example, an NCCL run on two simulated devices, a run served by memtrace's caching
allocator, a merged PyTorch + memtrace file, a PyTorch-shaped snapshot with an out-of-memory, one
with pinned host memory, and a generated PyTorch-shaped history of 300,000 entries.

For each: `memtrace report` writes the page; its data's totals must equal `memtrace summary --json`
for the same file (peak and end of every device); then report/web/tests/page_test.mjs drives the
page in headless Chromium: no console error, no request at all, every section drawn, the figures
the page shows equal to its data, a click on the chart moving the live set to another moment, and
a screenshot of each section kept under OUT/<case>/.

    report_pages_test.py --memtrace BUILD/bin/memtrace --build BUILD --out DIR

Skipped (77) with the reason when Chromium, Node.js or the npm packages are missing, unless
CI=true or MEMTRACE_REQUIRE_BROWSER=1.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(SOURCE, 'cli', 'analysis', 'tests', 'data')
PAGE_TEST = os.path.join(SOURCE, 'report', 'web', 'tests', 'page_test.mjs')

# A PyTorch-shaped history, written by python3's pickle as torch.cuda.memory._dump_snapshot does.
GENERATE = r'''
import pickle, random, sys
N = int(sys.argv[2]); random.seed(5)
frames = [{'filename': '/home/me/model%d.py' % (i % 7), 'line': i % 300 + 1, 'name': 'layer_%d' % i} for i in range(400)]
stacks = [[frames[(s * 7 + d * 13) % 400] for d in range(8)] for s in range(2000)]
trace, live, t, addr = [], [], 1767225600000000, 0x7f0000000000
while len(trace) < N:
    t += 1
    if not live or random.random() < (0.55 if len(live) < 3000 else 0.45):
        size = 512 * random.randrange(1, 4096); st = stacks[random.randrange(2000)]
        trace.append({'action': 'segment_alloc', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': st})
        trace.append({'action': 'alloc', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': st})
        live.append((addr, size, st)); addr += 1 << 21
    else:
        a, size, st = live.pop(random.randrange(len(live)))
        for act in ('free_requested', 'free_completed', 'segment_free'):
            trace.append({'action': act, 'addr': a, 'size': size, 'stream': 0, 'time_us': t, 'frames': st})
segs = [{'device': 0, 'address': a, 'total_size': size, 'allocated_size': size, 'active_size': size,
         'requested_size': size, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': (0, 0),
         'is_expandable': False, 'frames': st,
         'blocks': [{'address': a, 'size': size, 'requested_size': size, 'state': 'active_allocated', 'frames': st}]}
        for a, size, st in sorted(live)]
with open(sys.argv[1], 'wb') as f:
    pickle.dump({'segments': segs, 'device_traces': [trace], 'allocator_settings': {}, 'external_annotations': []}, f, protocol=4)
'''


def required():
    return os.environ.get('CI') == 'true' or os.environ.get('MEMTRACE_REQUIRE_BROWSER') == '1'


def skip(why):
    if required():
        print(f'FAIL: {why} (CI=true or MEMTRACE_REQUIRE_BROWSER=1: the browser test must run)')
        sys.exit(1)
    print(f'SKIPPED: {why}')
    sys.exit(77)


def page_data(path):
    html = open(path, encoding='utf-8').read()
    m = re.search(r'<script id="memtrace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    ap.add_argument('--build', required=True)
    ap.add_argument('--out', required=True)
    opts = ap.parse_args()
    mt, build = os.path.abspath(opts.memtrace), os.path.abspath(opts.build)
    node = shutil.which('node')
    chromium = os.environ.get('MEMTRACE_CHROMIUM') or shutil.which('chromium')
    if not node:
        skip('no Node.js (`node`) on PATH; scripts/setup.sh installs it')
    if not chromium:
        skip("no Chromium (Debian's `chromium`); scripts/setup.sh installs it")
    if not os.path.isdir(os.path.join(SOURCE, 'report', 'web', 'node_modules', 'playwright-core')):
        skip('the page\'s npm packages are not installed (report/web/node_modules); scripts/setup.sh installs them')
    if not os.path.exists(os.path.join(build, 'share', 'memtrace', 'report', 'uPlot.iife.min.js')):
        skip('the report assets are incomplete in the build (npm packages missing at build time)')
    out = os.path.abspath(opts.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    problems = []
    env = dict(os.environ)
    env.pop('LD_PRELOAD', None)

    def run(argv, **kw):
        return subprocess.run(argv, capture_output=True, text=True, env=kw.pop('env', env), **kw)

    # The snapshots: committed ones, and ones made now by running the examples under memtrace.
    cases = {'leak': os.path.join(DATA, 'mt_leak.pickle'), 'nccl': os.path.join(DATA, 'mt_nccl.pickle'),
             'pytorch_oom': os.path.join(DATA, 'torch_oom_p4.pickle'),
             'pinned_host': os.path.join(DATA, 'torch_pinned_p4.pickle'),
             # ranges (docs/ranges.md): memtrace's 'ranges' keys, and derived from PyTorch's markers
             'ranges': os.path.join(DATA, 'mt_ranges.pickle'), 'pytorch_ranges': os.path.join(DATA, 'torch_ranges_p4.pickle')}
    caching = os.path.join(out, 'caching.pickle')
    r = run([mt, 'run', '--sim', '-o', caching, '--no-summary', '--', os.path.join(build, 'bin', 'runtime_loop')],
            env=dict(env, MEMTRACE_ALLOCATOR='caching'))
    if r.returncode == 0 and os.path.exists(caching):
        cases['caching'] = caching
    else:
        problems.append(f'the caching-mode run failed ({r.returncode}): {r.stderr.strip()}')
    merged = os.path.join(out, 'merged.pickle')
    r = run([mt, 'merge', os.path.join(DATA, 'torch_step_p5.pickle'), os.path.join(DATA, 'memtrace_step.pickle'), '-o', merged])
    if r.returncode == 0:
        cases['merged'] = merged
    else:
        problems.append(f'merge failed: {r.stderr.strip()}')
    large = os.path.join(out, 'large.pickle')
    subprocess.run([sys.executable, '-c', GENERATE, large, '300000'], check=True)
    cases['large_pytorch'] = large

    timings = {}
    for name, snap in cases.items():
        page = os.path.join(out, name, 'report.html')
        os.makedirs(os.path.dirname(page), exist_ok=True)
        r = run([mt, 'report', snap, '-o', page])
        if r.returncode != 0:
            problems.append(f'{name}: memtrace report exit {r.returncode}: {r.stderr.strip()}')
            continue
        data = page_data(page)
        summ = json.loads(run([mt, 'summary', '--json', snap]).stdout)
        want = {d['device']: d for d in summ['devices']}
        if summ.get('host_memory'):
            want[-1] = summ['host_memory']
        for dev in data['devices']:
            w = want.get(dev['device'])
            if w is None:
                problems.append(f'{name}: device {dev["device"]} is not in summary --json')
                continue
            for what, got, expect in (('peak allocated', dev['peak']['allocated_bytes'], w['peak_allocated_bytes']),
                                      ('peak reserved', dev['peak']['reserved_bytes'], w['peak_reserved_bytes']),
                                      ('allocated at the end', dev['end']['allocated_bytes'], w['allocated_bytes'])):
                if got != expect:
                    problems.append(f'{name} device {dev["device"]}: {what} {got}, summary says {expect}')
        if name in ('ranges', 'pytorch_ranges'):
            # The split by range at the end is `summary --by range`'s groups.
            by_range = json.loads(run([mt, 'summary', '--json', '--by', 'range', snap]).stdout)
            names = data.get('ranges') or []
            if not names:
                problems.append(f'{name}: the page has no ranges')
            for dev in data['devices']:
                w = next((d for d in by_range['devices'] if d['device'] == dev['device']), None)
                end = dev['moments'][-1].get('by_range') or []
                got = {names[g]: b for g, b in enumerate(end) if b}
                expect = {r['range']: r['bytes'] for r in (w or {}).get('ranges', []) if r['bytes']}
                if got != expect:
                    problems.append(f'{name} device {dev["device"]}: by range at the end {got}, summary says {expect}')
        if name == 'merged' and not data['header']['parts']:
            problems.append('merged: the header lists no parts')
        r = run([node, PAGE_TEST, '--page', page, '--out', os.path.join(out, name), '--chromium', chromium, '--name', name],
                timeout=280)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ''
        try:
            result = json.loads(last)
            timings[name] = result.get('timing', {}).get('ready_ms')
        except json.JSONDecodeError:
            pass
        if r.returncode != 0:
            problems.append(f'{name}: the page test failed ({r.returncode}):\n{r.stdout.strip()}\n{r.stderr.strip()}')
    for p in problems:
        print(p)
    print('pages:', ', '.join(f'{k} ready in {v} ms' for k, v in timings.items()))
    print(f'{len(cases)} reports drawn in Chromium; {len(problems)} problems; screenshots under {out}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
