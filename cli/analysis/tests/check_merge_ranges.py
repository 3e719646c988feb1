#!/usr/bin/env python3
"""`memtrace merge` writes memtrace's `ranges` back as they were (docs/ranges.md, "What a snapshot
carries"): merges data/torch_step_p5.pickle with data/mt_ranges.pickle, then checks that

  * no dict of the merged pickle sets a key twice (the reader reads `ranges` and also keeps it:
    written from both, it would be there twice; Python's pickle would silently keep the last one,
    so the file is read with an unpickler that counts every SETITEM);
  * every memtrace entry kept (matched by device, time_us, action and addr) and every memtrace
    block (by address) has the `ranges` and `user_metadata` it had;
  * `memtrace summary --json --by range` of the merged file gives memtrace's segments the range
    bytes the memtrace file gives them.

    python3 check_merge_ranges.py --memtrace BUILD/bin/memtrace

Exit 0: all hold; 1: a difference (each printed); 77: bin/memtrace is not built.
"""
import argparse
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, 'data')


class CountingUnpickler(pickle._Unpickler):  # the pure-Python one: its opcodes can be hooked
    duplicates = []
    dispatch = dict(pickle._Unpickler.dispatch)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        d = self.stack[-1]
        if key in d:
            CountingUnpickler.duplicates.append(key)
        d[key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self):
        items = self.pop_mark()
        d = self.stack[-1]
        for i in range(0, len(items), 2):
            if items[i] in d:
                CountingUnpickler.duplicates.append(items[i])
            d[items[i]] = items[i + 1]
    dispatch[pickle.SETITEMS[0]] = load_setitems


def range_bytes(memtrace, path):
    r = subprocess.run([memtrace, 'summary', '--json', '--by', 'range', path], stdout=subprocess.PIPE, text=True,
                       check=True)
    doc = json.loads(r.stdout)
    return {(d['device'], g['range']): g['bytes'] for d in doc['devices'] for g in d['ranges']}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    a = ap.parse_args()
    if not os.path.exists(a.memtrace):
        return 77
    mt_path = os.path.join(DATA, 'mt_ranges.pickle')
    with open(mt_path, 'rb') as f:
        mt = pickle.load(f)
    problems = []
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, 'merged.pickle')
        r = subprocess.run([a.memtrace, 'merge', os.path.join(DATA, 'torch_step_p5.pickle'), mt_path, '-o', out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(f'memtrace merge failed ({r.returncode}): {r.stderr}')
            return 1
        with open(out, 'rb') as f:
            merged = CountingUnpickler(io.BytesIO(f.read())).load()
        for key in CountingUnpickler.duplicates:
            problems.append(f'a dict of the merged file sets {key!r} twice')

        kept = {}
        for d, entries in enumerate(merged['device_traces']):
            for e in entries:
                kept[(d, e.get('time_us'), e['action'], e.get('addr'))] = e
        matched = 0
        for d, entries in enumerate(mt['device_traces']):
            for e in entries:
                m = kept.get((d, e.get('time_us'), e['action'], e.get('addr')))
                if m is None:
                    continue  # dropped as a duplicate of PyTorch's or a marker
                matched += 1
                for key in ('ranges', 'user_metadata'):
                    if e.get(key, '') != m.get(key, ''):
                        problems.append(f'device {d} {e["action"]} at {e.get("time_us")}: {key} {m.get(key)!r}, '
                                        f'expected {e.get(key)!r}')
        if matched < sum(1 for l in mt['device_traces'] for e in l if 'ranges' in e) - 1:
            problems.append(f'only {matched} of memtrace\'s entries found in the merged file')
        blocks = {b['address']: b for s in merged['segments'] for b in s['blocks']}
        for s in mt['segments']:
            for b in s['blocks']:
                m = blocks.get(b['address'])
                if m is None:
                    problems.append(f'block {b["address"]:#x} is not in the merged file')
                elif b.get('ranges') != m.get('ranges'):
                    problems.append(f'block {b["address"]:#x}: ranges {m.get("ranges")!r}, expected {b.get("ranges")!r}')

        want = range_bytes(a.memtrace, mt_path)
        got = range_bytes(a.memtrace, out)
        for (d, rng), n in want.items():
            if rng == '(no range)':
                continue  # PyTorch's own allocations join memtrace's unranged ones
            if got.get((d, rng)) != n:
                problems.append(f'device {d} range {rng!r}: {got.get((d, rng))} bytes in the merge, {n} in memtrace\'s file')
    for p in problems:
        print(p)
    print('merge keeps ranges: ' + ('FAIL' if problems else 'ok'))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
