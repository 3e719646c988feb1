#!/usr/bin/env python3
"""`memtrace merge` carries what newer PyTorch writes and memtrace does not interpret, unchanged
(docs/snapshot-format.md, "Keys kept as they were"): merges data/torch_newer_keys_p4.pickle with
data/memtrace_step.pickle, loads the result with pickle and compares every key of every PyTorch
entry (matched by list, time_us and addr), segment and block (by address), the host lists,
external_annotations, allocator_settings and the top-level keys with the input's.

    python3 check_merge_kept_keys.py --memtrace BUILD/bin/memtrace

Exit 0: all survived; 1: a difference (each printed); 77: bin/memtrace is not built.
"""
import argparse
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, 'data')
# Keys the merge writes itself: recomputed from the blocks, or memtrace's own additions.
DERIVED_SEGMENT = {'allocated_size', 'active_size', 'requested_size'}
# Every entry gets addr, size and stream (0 when absent, as the reader reads them) and a category.
ADDED_ENTRY = {'category', 'addr', 'size', 'stream'}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    a = ap.parse_args()
    if not os.path.exists(a.memtrace):
        return 77
    src = os.path.join(DATA, 'torch_newer_keys_p4.pickle')
    with open(src, 'rb') as f:
        pt = pickle.load(f)
    problems = []
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, 'merged.pickle')
        r = subprocess.run([a.memtrace, 'merge', src, os.path.join(DATA, 'memtrace_step.pickle'), '-o', out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(f'memtrace merge failed ({r.returncode}): {r.stderr}')
            return 1
        with open(out, 'rb') as f:
            m = pickle.load(f)

    def same(what, want, got):
        if want != got or type(want) is not type(got):
            problems.append(f'{what}: want {want!r}, got {got!r}')

    def entries(lists):
        return {(i, e['time_us'], e.get('addr', 0), e['action']): e for i, l in enumerate(lists) for e in l}

    got = entries(m['device_traces'] + [m.get('host_traces', [])])
    for key, e in entries(pt['device_traces'] + [pt['host_traces']]).items():
        g = got.get(key)
        if g is None:
            problems.append(f'entry {key}: missing')
            continue
        for k, v in e.items():
            same(f'entry {key} key {k!r}', v, g.get(k))
        for k in set(g) - set(e) - ADDED_ENTRY:
            problems.append(f'entry {key}: key {k!r} added')

    def by_address(segs):
        return {(s['device'], s['address']): s for s in segs}

    got_segs = by_address(m['segments'] + m.get('host_segments', []))
    for key, s in by_address(pt['segments'] + pt['host_segments']).items():
        g = got_segs.get(key)
        if g is None:
            problems.append(f'segment {key}: missing')
            continue
        for k, v in s.items():
            if k not in DERIVED_SEGMENT | {'blocks'}:
                same(f'segment {key} key {k!r}', v, g.get(k))
        for b, gb in zip(s['blocks'], g['blocks']):
            for k, v in b.items():
                same(f'segment {key} block {b["address"]:#x} key {k!r}', v, gb.get(k))
        same(f'segment {key} block count', len(s['blocks']), len(g['blocks']))

    same('external_annotations', pt['external_annotations'], m['external_annotations'])
    settings = {k: v for k, v in m['allocator_settings'].items() if k != 'memtrace'}
    same('allocator_settings', pt['allocator_settings'], settings)
    same('allocator_settings key order', list(pt['allocator_settings']), list(settings))
    for k in set(pt) - {'segments', 'device_traces', 'host_segments', 'host_traces', 'allocator_settings',
                        'external_annotations'}:
        same(f'top-level key {k!r}', pt[k], m.get(k))
    for p in problems:
        print(p)
    print(f'{len(problems)} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
