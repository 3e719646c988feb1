#!/usr/bin/env python3
"""`memtrace report` at the scale the browser viewer cannot open (issue 15's targets):

    python3 bench/bench_report.py --memtrace build/bin/memtrace [--entries 5000000] [--stacks 50000]
                                  [--dir DIR] [--keep]

1. Generates a PyTorch-shaped snapshot (pickle protocol 4, as torch.cuda.memory._dump_snapshot
   writes it: frame dicts and frame lists shared, compile_context/user_metadata on every entry,
   segments of 3 blocks): ENTRIES trace entries on 2 devices, STACKS distinct stacks of 16 frames.
   The live set climbs to ~6,000 allocations, churns, and falls to ~1,000, so the peak is mid-history.
2. Times `memtrace report` on it (wall and CPU of the child, its peak RSS) and states the page's size.
   Targets: written in under 10 s, under 25 MB.
3. When the browser harness is installed (report/web/tests), loads the page in headless Chromium
   and times navigation to first draw (window.MEMTRACE_READY). Target: under 3 s.
4. PyTorch's own viewer beside it, in the same browser: the page `_memory_viz.py trace_plot` writes
   for the same file (PyTorch's MemoryViz.js from Debian's PyTorch source and d3 from npm, answered
   from disk: tests/browser/memory_viz_offline.mjs), timed to its first draw, or to --viz-limit.
   Needs what scripts/setup.sh fetched into the build folder (memory_viz/, browser/node_modules).
Not a test: figures depend on the machine; the load is printed with them.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

GEN = r'''
import gc, pickle, random, sys
gc.disable()
N, S, D = int(sys.argv[2]), int(sys.argv[3]), 16
random.seed(7)
frames = {}
def frame(fn):
    f = frames.get(fn)
    if f is None:
        f = frames[fn] = {'filename': '/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module%d.py' % (fn % 40),
                          'line': fn % 900 + 1, 'name': 'forward_%d' % fn}
    return f
stacks = [None]
for s in range(1, S + 1):
    st = []
    for d in range(D):
        outer = D - 1 - d
        spread = 1 + outer * 3 if outer < 4 else 60000
        st.append(frame(((s * 2654435761 + d * 40503) & 0xffffffff) % spread + outer * 7))
    stacks.append(st)
traces = [[], []]
t = 1767225600000000
nxt = 0x7f0000000000
open_ = []
count = 0
def push(r, action, size):
    global t, count
    t += 1
    count += 1
    traces[r[3]].append({'action': action, 'addr': r[0], 'size': size, 'stream': 0, 'time_us': t,
                         'compile_context': '', 'user_metadata': '', 'frames': stacks[r[2]]})
while count < N:
    phase = count / N
    target = 6000 if phase < 0.3 else 4000 if phase < 0.7 else 1000
    if not open_ or random.random() < (0.7 if len(open_) < target else 0.3):
        size = 512 * (1 + random.randrange(4096))
        r = (nxt, size, 1 + random.randrange(S), random.randrange(2), 0, size - random.randrange(512))
        nxt += 0x200000
        push(r, 'segment_alloc', size)
        push(r, 'alloc', r[5])
        open_.append(r)
    else:
        k = random.randrange(len(open_))
        r = open_[k]
        open_[k] = open_[-1]
        open_.pop()
        push(r, 'free_requested', r[5])
        push(r, 'free_completed', r[5])
        push(r, 'segment_free', r[1])
segments = []
for r in sorted(open_, key=lambda r: (r[3], r[0])):
    st = stacks[r[2]]
    segments.append({'device': r[3], 'address': r[0], 'total_size': r[1] + 1024, 'allocated_size': r[1],
                     'active_size': r[1], 'requested_size': r[5], 'stream': 0, 'segment_type': 'large',
                     'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': st,
                     'blocks': [{'address': r[0], 'size': r[1], 'requested_size': r[5], 'state': 'active_allocated', 'frames': st},
                                {'address': r[0] + r[1], 'size': 512, 'requested_size': 0, 'state': 'inactive', 'frames': []},
                                {'address': r[0] + r[1] + 512, 'size': 512, 'requested_size': 0, 'state': 'inactive', 'frames': []}]})
snap = {'segments': segments, 'device_traces': traces,
        'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': -1, 'garbage_collection_threshold': 0.0,
                               'expandable_segments': False, 'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)}},
        'external_annotations': []}
with open(sys.argv[1], 'wb') as f:
    pickle.dump(snap, f, protocol=4)
import os
os._exit(0)
'''


def run_child(argv, env=None):
    """Wall time, CPU time (user + system) and peak RSS of this one child (wait4: RUSAGE_CHILDREN's
    peak would be the largest of every child so far, the snapshot generator's included)."""
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(argv, p.returncode, out.read(), err.read())
    return r, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def time_memory_viz(args, snap, here):
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.memtrace)))
    viz, modules = os.path.join(build, 'memory_viz'), os.path.join(build, 'browser', 'node_modules')
    if not os.path.exists(os.path.join(viz, 'MemoryViz.js')) or not os.path.exists(os.path.join(modules, 'd3')):
        print(f"PyTorch's viewer: not timed ({viz}/MemoryViz.js or {modules}/d3 missing; scripts/setup.sh fetches them)")
        return
    page = os.path.join(args.dir, 'memtrace_bench_memory_viz.html')
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, os.path.join(viz, '_memory_viz.py'), 'trace_plot', snap, '-o', page],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"PyTorch's _memory_viz.py trace_plot failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        return
    print(f"PyTorch's _memory_viz.py trace_plot: {time.perf_counter() - t0:.1f} s, page {os.path.getsize(page) / 1e6:.1f} MB")
    r = subprocess.run(['node', os.path.join(here, 'time_memory_viz.mjs'), '--modules', modules, '--memory-viz', viz,
                        '--limit', str(args.viz_limit), page], capture_output=True, text=True)
    print(r.stdout.strip() or r.stderr.strip()[-300:])
    os.remove(page)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    ap.add_argument('--entries', type=int, default=5000000)
    ap.add_argument('--stacks', type=int, default=50000)
    ap.add_argument('--dir', default=os.environ.get('TMPDIR', '/tmp'))
    ap.add_argument('--keep', action='store_true')
    ap.add_argument('--viz-limit', type=int, default=300, help="seconds PyTorch's viewer may take (default 300)")
    args = ap.parse_args()
    snap = os.path.join(args.dir, f'memtrace_bench_report_{args.entries}.pickle')
    page = os.path.join(args.dir, f'memtrace_bench_report_{args.entries}.html')
    print(f'load: {os.getloadavg()[0]:.2f} (1-minute average) on {os.cpu_count()} cores')
    if not os.path.exists(snap):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, '-c', GEN, snap, str(args.entries), str(args.stacks)], check=True)
        print(f'generated {snap} in {time.perf_counter() - t0:.1f} s')
    size = os.path.getsize(snap)
    print(f'snapshot: {args.entries:,} trace entries on 2 devices, {args.stacks:,} stacks x 16 frames, '
          f'{size / 2**20:.1f} MiB (PyTorch-shaped, pickle protocol 4)')
    runs = []
    for _ in range(3):
        r, wall, cpu, rss = run_child([args.memtrace, 'report', snap, '-o', page])
        if r.returncode != 0:
            print(f'memtrace report failed ({r.returncode}): {r.stderr.strip()}')
            return 1
        runs.append((wall, cpu))
    runs.sort()
    wall, cpu = runs[1]
    out = os.path.getsize(page)
    print(f'memtrace report: {wall:.2f} s (cpu {cpu:.2f} s; median of 3), peak RSS {rss:.0f} MiB = '
          f'{rss * 2**20 / size:.2f}x the file; page {out / 1e6:.1f} MB '
          f'[{"under" if wall < 10 else "OVER"} 10 s, {"under" if out < 25e6 else "OVER"} 25 MB]')
    here = os.path.dirname(os.path.abspath(__file__))
    timer = os.path.join(here, '..', 'report', 'web', 'tests', 'time_page.mjs')
    if os.path.exists(timer):
        r = subprocess.run(['node', timer, page], capture_output=True, text=True)
        print(r.stdout.strip() or r.stderr.strip())
    else:
        print('(browser timing skipped: report/web/tests/time_page.mjs is not there)')
    time_memory_viz(args, snap, here)
    if not args.keep:
        os.remove(snap)
        os.remove(page)
    return 0


if __name__ == '__main__':
    sys.exit(main())
