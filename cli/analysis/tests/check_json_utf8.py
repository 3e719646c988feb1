#!/usr/bin/env python3
"""Reads every command's --json output with a strict UTF-8 decoder and checks the JSON rules of
docs/reports.md, "JSON output": one document that decodes and parses, schema_version first,
snake_case keys, byte quantities named *_bytes.

The inputs carry text that is not valid UTF-8 the way real snapshots do: a Python str with a lone
surrogate (pickle writes it with 'surrogatepass'), a stray byte from a path that came through
surrogateescape, an overlong form. Each must come out as U+FFFD, and the test checks it did, so it
fails if the bad text never reached the output as well as if it reached it unrepaired.

    python3 check_json_utf8.py --memtrace BUILD/bin/memtrace
"""
import argparse
import copy
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_pytorch_snapshots as mk  # noqa: E402

# Keys whose value is a byte quantity must say so; these stems mark one.
BYTE_STEMS = ('reserved', 'allocated', 'capacity', 'free_block', 'largest_free', 'delta', 'size',
              'fragmentation', 'released', 'written', 'live', 'requested')
# A count of things may share a stem with a byte quantity (live_allocations, failed_requests).
COUNT_NOUNS = ('allocations', 'entries', 'segments', 'calls', 'requests', 'blocks', 'count')
KEY = re.compile(r'^[a-z][a-z0-9_]*$')


def poison(snapshot):
    """The snapshot with its frames' names and files made invalid UTF-8 in three ways."""
    s = copy.deepcopy(snapshot)
    bad = ['\ud800lone_surrogate', 'stray_\udcff_byte', 'ok']
    seen = set()
    n = 0

    def walk(o):
        nonlocal n
        if isinstance(o, dict):
            if 'filename' in o and 'name' in o and id(o) not in seen:
                seen.add(id(o))
                o['name'] = o['name'] + bad[n % 3]
                o['filename'] = '/home/\udce9l\u00e8ve/' + o['filename']
                n += 1
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(s)
    s['allocator_settings']['PYTORCH_CUDA_ALLOC_CONF'] = 'bad\ud83d'
    return s


def check_document(name, raw):
    problems = []
    try:
        text = raw.decode('utf-8', errors='strict')  # rejects surrogates, overlongs, stray bytes
    except UnicodeDecodeError as e:
        return [f'{name}: not valid UTF-8: {e}']
    lines = text.splitlines()
    if len(lines) != 1:
        problems.append(f'{name}: {len(lines)} lines, expected one document on one line')
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return problems + [f'{name}: not JSON: {e}']
    if not isinstance(doc, dict) or next(iter(doc), None) != 'schema_version':
        problems.append(f'{name}: top-level object does not start with schema_version')
    elif doc['schema_version'] != 1:
        problems.append(f'{name}: schema_version {doc["schema_version"]!r}')

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                if not KEY.match(k):
                    problems.append(f'{name}: key {path}.{k} is not snake_case')
                if (isinstance(v, int) and not isinstance(v, bool) and any(st in k for st in BYTE_STEMS)
                        and not k.endswith('_bytes') and not k.endswith(COUNT_NOUNS)):
                    problems.append(f'{name}: byte quantity {path}.{k} does not end in _bytes')
                walk(v, f'{path}.{k}')
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, f'{path}[{i}]')
    walk(doc, '')
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    args = ap.parse_args()
    if not os.path.exists(args.memtrace):
        print(f'skipped: {args.memtrace} is not built')
        return 77
    data = os.path.join(HERE, 'data')
    problems = []
    with tempfile.TemporaryDirectory() as d:
        def dump(fname, obj):
            path = os.path.join(d, fname)
            with open(path, 'wb') as f:
                pickle.dump(obj, f, protocol=4)
            return path
        oom = dump('oom.pickle', poison(mk.oom_training_step()))
        step = dump('step.pickle', poison(mk.small_training_step()))
        later = dump('later.pickle', poison(mk.later_training_step()))
        os.makedirs(os.path.join(d, 'ranks'))
        for rank in range(3):
            dump(os.path.join('ranks', f'snapshot_rank{rank}.pickle'), poison(mk.rank_snapshot(rank, rank)))
        mt = os.path.join(data, 'mt_leak.pickle')
        runs = {
            'summary': ['summary', '--json', oom],
            'summary (memtrace file)': ['summary', '--json', mt],
            'peak': ['peak', '--json', oom],
            'leaks': ['leaks', '--json', later],
            'diff': ['diff', '--json', step, later],
            'flamegraph': ['flamegraph', '--json', oom, '-o', os.path.join(d, 'out.folded')],
            'merge': ['merge', '--json', step, os.path.join(data, 'memtrace_step.pickle'), '-o',
                      os.path.join(d, 'merged.pickle')],
            'ranks': ['ranks', '--json', os.path.join(d, 'ranks')],
            'replay': ['replay', '--json', '--capacity', 'recorded', oom],
        }
        replaced = set()
        for name, argv in runs.items():
            r = subprocess.run([args.memtrace] + argv, capture_output=True)
            if r.returncode != 0:
                problems.append(f'{name}: exit {r.returncode}: {r.stderr.decode(errors="replace").strip()}')
                continue
            problems += check_document(name, r.stdout)
            if '\ufffd'.encode() in r.stdout:
                replaced.add(name)
        # The commands that print stacks must have carried the poisoned frames through, repaired.
        for name in ('summary', 'peak', 'leaks', 'diff'):
            if name not in replaced:
                problems.append(f'{name}: no U+FFFD in the output: the invalid frame text never reached it')
    for p in problems:
        print(p)
    print(f'{len(runs)} JSON documents checked, {len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
