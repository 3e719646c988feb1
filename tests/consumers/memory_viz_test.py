#!/usr/bin/env python3
"""PyTorch's own snapshot reader, torch/cuda/_memory_viz.py (from Debian's python3-torch, fetched by
scripts/fetch-memory-viz.sh), run on the snapshots memtrace writes and reads: memtrace's own from
the simulated device (the committed ones and fresh runs of this build's examples), those `memtrace
merge` writes, and PyTorch-shaped ones.

Each file must go through `stats`, `trace`, `trace_plot` and `segment_plot` with exit status 0, and
the totals `stats` prints (total_reserved, total_allocated, in its own rounding) must be the ones
`memtrace summary --json` gives for the same file, summed over the devices.

    memory_viz_test.py --memtrace BUILD/bin/memtrace --memory-viz BUILD/memory_viz/_memory_viz.py --build BUILD

Skipped (77) with the reason when _memory_viz.py could not be fetched, unless
MEMTRACE_REQUIRE_PYTHONS=1 (CI), where it fails.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, '..', '..', 'cli', 'analysis', 'tests', 'data')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    ap.add_argument('--memory-viz', required=True)
    ap.add_argument('--build', help='the build folder, for fresh snapshots of its examples on the simulated device')
    opts = ap.parse_args()
    if not os.path.exists(opts.memory_viz):
        why = f'{opts.memory_viz} is not there (scripts/fetch-memory-viz.sh fetches it)'
        if os.environ.get('MEMTRACE_REQUIRE_PYTHONS') == '1':
            print(f'FAIL: {why}; MEMTRACE_REQUIRE_PYTHONS=1 requires it')
            return 1
        print(f'SKIPPED: {why}')
        return 77
    spec = importlib.util.spec_from_file_location('pytorch_memory_viz', opts.memory_viz)
    viz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(viz)
    mt = os.path.abspath(opts.memtrace)
    problems = []
    with tempfile.TemporaryDirectory() as d:
        files = {n: os.path.join(DATA, n) for n in sorted(os.listdir(DATA)) if n.endswith('.pickle')}
        for name, (a, b) in {'merged_step.pickle': ('torch_step_p5.pickle', 'memtrace_step.pickle'),
                             'merged_nccl.pickle': ('torch_step_p5.pickle', 'mt_nccl.pickle'),
                             'merged_newer_keys.pickle': ('torch_newer_keys_p4.pickle', 'memtrace_step.pickle')}.items():
            if not os.path.exists(os.path.join(DATA, a)):
                continue
            out = os.path.join(d, name)
            r = subprocess.run([mt, 'merge', os.path.join(DATA, a), os.path.join(DATA, b), '-o', out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f'merge {a} {b}: {r.stderr.strip()}')
                continue
            files[name] = out
        # Fresh snapshots from this build's writer: the examples on the simulated device, one of them
        # served by memtrace's caching allocator, one on two devices.
        if opts.build:
            for name, prog, env in (('run_leak', 'leak', {}), ('run_loop_caching', 'runtime_loop', {'MEMTRACE_ALLOCATOR': 'caching'}),
                                    ('run_nccl', 'nccl_allreduce', {'SIMCUDA_DEVICES': '2'})):
                exe = os.path.join(opts.build, 'bin', prog)
                if not os.path.exists(exe):
                    problems.append(f'{exe} is not built')
                    continue
                out = os.path.join(d, name + '.pickle')
                r = subprocess.run([mt, 'run', '--sim', '--no-summary', '-o', out, '--', exe], capture_output=True, text=True,
                                   env=dict(os.environ, **env))
                if r.returncode != 0 or not os.path.exists(out):
                    problems.append(f'memtrace run {prog}: exit {r.returncode}: {r.stderr.strip()}')
                    continue
                files[name + '.pickle'] = out
        for name, path in files.items():
            for action, extra in (('stats', []), ('trace', []), ('trace_plot', ['-o', os.path.join(d, 'tp.html')]),
                                  ('segment_plot', ['-o', os.path.join(d, 'sp.html')])):
                r = subprocess.run([sys.executable, opts.memory_viz, action, path, *extra], capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f'{name}: _memory_viz.py {action} failed ({r.returncode}): '
                                    f'{r.stderr.strip().splitlines()[-1:]}')
                    continue
                if action == 'stats':
                    got = dict(re.findall(r'^(total_reserved|total_allocated): (\S+)', r.stdout, re.M))
                    s = json.loads(subprocess.run([mt, 'summary', '--json', path], capture_output=True, text=True).stdout)
                    want = {'total_reserved': viz._format_size(sum(x['reserved_bytes'] for x in s['devices'])),
                            'total_allocated': viz._format_size(sum(x['allocated_bytes'] for x in s['devices']))}
                    if got != want:
                        problems.append(f'{name}: _memory_viz.py stats says {got}, memtrace summary {want}')
                if action == 'trace' and '----------------' not in r.stdout and 'entries' not in r.stdout:
                    problems.append(f'{name}: _memory_viz.py trace printed no device: {r.stdout[:200]!r}')
    for p in problems:
        print(p)
    version = open(os.path.join(os.path.dirname(opts.memory_viz), 'VERSION')).read().strip() \
        if os.path.exists(os.path.join(os.path.dirname(opts.memory_viz), 'VERSION')) else '?'
    print(f"{len(files)} snapshots through PyTorch's _memory_viz.py {version}; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
