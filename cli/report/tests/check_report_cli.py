#!/usr/bin/env python3
"""`memtrace report` as a user meets it, with a minimal set of page assets (the real page is
tested in a browser by report/web/tests):

- on every committed snapshot: exit 0, one page with the three markers replaced, and the data's
  totals equal to `memtrace summary --json` for the same file (peak and end, every device and the
  pinned host memory);
- `-o -` writes the page to stdout, the default output is FILE with .html for .pickle;
- bad input (not a snapshot, truncated, empty, a device not in the file): memtrace's one-line
  error, exit 2, and no file written; missing assets: one line, exit 127; an output that cannot
  be written: one line, exit 1, and an existing file left as it was.

    python3 check_report_cli.py --memtrace BUILD/bin/memtrace
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, '..', '..', 'analysis', 'tests', 'data')
FILES = ['mt_leak.pickle', 'mt_python.pickle', 'mt_nccl.pickle', 'mt_loop_truncated.pickle', 'memtrace_step.pickle',
         'torch_step_p2.pickle', 'torch_later_p5.pickle', 'torch_oom_p4.pickle', 'torch_pinned_p4.pickle']
TEMPLATE = ('<!doctype html><html><head><style>/*MEMTRACE_STYLES*/</style></head>'
            '<body><!--MEMTRACE_DATA--><!--MEMTRACE_SCRIPTS--></body></html>\n')

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)
    return ok


def page_data(html):
    m = re.search(r'<script id="memtrace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    mt = os.path.abspath(ap.parse_args().memtrace)
    with tempfile.TemporaryDirectory() as d:
        assets = os.path.join(d, 'assets')
        os.makedirs(assets)
        with open(os.path.join(assets, 'report.html'), 'w') as f:
            f.write(TEMPLATE)
        with open(os.path.join(assets, 'styles.txt'), 'w') as f:
            f.write('page.css\n')
        with open(os.path.join(assets, 'page.css'), 'w') as f:
            f.write('body { margin: 0 }\n')
        with open(os.path.join(assets, 'scripts.txt'), 'w') as f:
            f.write('page.js\n')
        with open(os.path.join(assets, 'page.js'), 'w') as f:
            f.write('window.PAGE = "</script>";\n')
        env = dict(os.environ, MEMTRACE_REPORT_ASSETS=assets)

        def run(*argv, cwd=d, environ=env):
            return subprocess.run([mt, *argv], capture_output=True, text=True, env=environ, cwd=cwd)

        for name in FILES:
            src = os.path.join(DATA, name)
            out = os.path.join(d, name + '.html')
            r = run('report', src, '-o', out, '--json')
            if not check(r.returncode == 0, f'{name}: exit {r.returncode}: {r.stderr.strip()}'):
                continue
            info = json.loads(r.stdout)
            html = open(out, encoding='utf-8').read()
            check(info['written_bytes'] == len(html.encode()), f'{name}: --json written_bytes')
            check('<!--MEMTRACE_' not in html and '/*MEMTRACE_' not in html, f'{name}: a marker was left in the page')
            check('body { margin: 0 }' in html and 'window.PAGE = "<\\/script>"' in html, f'{name}: assets not inlined')
            data = page_data(html)
            if not check(data is not None, f'{name}: no data in the page'):
                continue
            summ = json.loads(run('summary', '--json', src).stdout)
            want = {dv['device']: dv for dv in summ['devices']}
            if summ['host_memory'] is not None:
                want[-1] = summ['host_memory']
            got = {dv['device']: dv for dv in data['devices']}
            check(sorted(got) == sorted(want), f'{name}: devices {sorted(got)}, summary has {sorted(want)}')
            for dev, w in want.items():
                g = got.get(dev)
                if g is None:
                    continue
                pairs = [('peak allocated', g['peak']['allocated_bytes'], w['peak_allocated_bytes']),
                         ('peak reserved', g['peak']['reserved_bytes'], w['peak_reserved_bytes']),
                         ('allocated at the end', g['end']['allocated_bytes'], w['allocated_bytes']),
                         ('reserved at the end', g['end']['reserved_bytes'], w['reserved_bytes']),
                         ('peak moment', next(m['allocated_bytes'] for m in g['moments'] if 'peak' in m['label']),
                          w['peak_allocated_bytes']),
                         ('leaks', g['leaks']['bytes'], sum(o['bytes'] for o in w['owners'])),
                         ('ooms', len(g['ooms']), len(w.get('out_of_memory', [])))]
                for what, a, b in pairs:
                    check(a == b, f'{name} device {dev}: {what} {a}, summary {b}')

        # The default output name, and the page on stdout.
        shutil.copy(os.path.join(DATA, 'torch_oom_p4.pickle'), os.path.join(d, 'snap.pickle'))
        r = run('report', 'snap.pickle')
        check(r.returncode == 0 and os.path.exists(os.path.join(d, 'snap.html')) and 'snap.html' in r.stdout,
              f'default output: {r.returncode} {r.stdout.strip()} {r.stderr.strip()}')
        r = run('report', 'snap.pickle', '-o', '-')
        check(r.returncode == 0 and page_data(r.stdout) is not None, 'report -o - does not write the page to stdout')

        # Bad input: one line, exit 2, no page.
        with open(os.path.join(d, 'not.pickle'), 'w') as f:
            f.write('hello\n')
        blob = open(os.path.join(DATA, 'torch_oom_p4.pickle'), 'rb').read()
        with open(os.path.join(d, 'cut.pickle'), 'wb') as f:
            f.write(blob[:len(blob) // 2])
        open(os.path.join(d, 'empty.pickle'), 'wb').close()
        for argv in (['not.pickle'], ['cut.pickle'], ['empty.pickle'], ['missing.pickle'],
                     ['--device', '3', 'snap.pickle'], ['--bogus', 'snap.pickle']):
            out = os.path.join(d, 'bad.html')
            r = run('report', *argv, '-o', out)
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 2, f'report {" ".join(argv)}: exit {r.returncode}, expected 2')
            check(1 <= len(lines) <= 2 and lines[0].startswith('memtrace report: '),
                  f'report {" ".join(argv)}: stderr {r.stderr!r}')
            check(not os.path.exists(out), f'report {" ".join(argv)}: wrote a page')

        # Missing assets: said once, before reading anything.
        r = run('report', 'snap.pickle', '-o', 'x.html', environ=dict(env, MEMTRACE_REPORT_ASSETS=os.path.join(d, 'none')))
        check(r.returncode == 127 and r.stderr.count('\n') == 1 and 'report assets not found' in r.stderr,
              f'missing assets: exit {r.returncode}, {r.stderr!r}')
        # An output that cannot be written: the old file stays.
        blocker = os.path.join(d, 'blocker')
        with open(blocker, 'w') as f:
            f.write('keep me')
        r = run('report', 'snap.pickle', '-o', os.path.join(blocker, 'r.html'))
        check(r.returncode == 1 and r.stderr.startswith('memtrace report: '), f'unwritable output: {r.returncode} {r.stderr!r}')
        check(open(blocker).read() == 'keep me', 'unwritable output: the file in the way was changed')
    for p in problems:
        print(p)
    print(f'{len(FILES)} snapshots reported; {len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
