#!/usr/bin/env python3
"""Golden tests of the memtrace analysis commands: runs each case on the committed snapshots in
data/ and compares exit status, stdout and stderr with expected/<case>.txt. merge's output is also
loaded with Python's pickle and checked by output/tests/check_snapshot.py (docs/snapshot-format.md,
"Consistency rules for a writer"). A speedscope file is shown indented, and checked against the
folded output of the same command (same stacks, same bytes).

    python3 run_golden.py --memtrace BUILD/bin/memtrace --checker output/tests/check_snapshot.py [--update] [CASE...]

--update rewrites the expected files from what the commands print now (review the diff before
committing). Exit 0: all pass; 1: a difference; 77: bin/memtrace is not built.
"""
import argparse
import copy
import difflib
import os
import pickle
import shutil
import gzip
import json
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, 'data')
EXPECTED = os.path.join(HERE, 'expected')

# name -> (argv after 'memtrace', {link name in the work dir: data file}) ; every data file is also
# linked under its own name.
STEP = {'torch_step.pickle': 'torch_step_p5.pickle'}
CASES = {
    # summary: memtrace's own files (simulated device) and PyTorch-shaped ones (pickle protocols 2, 4, 5)
    'summary_mt_leak': (['summary', 'mt_leak.pickle'], {}),
    'summary_mt_leak_json': (['summary', '--json', 'mt_leak.pickle'], {}),
    'summary_mt_nccl_device1': (['summary', '--device', '1', 'mt_nccl.pickle'], {}),
    'summary_mt_truncated_json': (['summary', '--json', 'mt_loop_truncated.pickle'], {}),
    'summary_torch_p2': (['summary', 'torch_step.pickle'], {'torch_step.pickle': 'torch_step_p2.pickle'}),
    'summary_torch_p4': (['summary', 'torch_step.pickle'], {'torch_step.pickle': 'torch_step_p4.pickle'}),
    'summary_torch_p5': (['summary', 'torch_step.pickle'], STEP),
    'summary_torch_json': (['summary', '--json', 'torch_step.pickle'], STEP),
    # PyTorch's C++ stacks folded to the frames that tell them apart; a recorded out-of-memory
    'summary_torch_oom': (['summary', 'torch_oom_p4.pickle'], {}),
    'summary_torch_oom_json': (['summary', '--json', 'torch_oom_p4.pickle'], {}),
    'summary_torch_oom_all_frames': (['summary', '--frames', 'all', 'torch_oom_p4.pickle'], {}),
    'peak_torch_oom': (['peak', 'torch_oom_p4.pickle'], {}),
    # memtrace's own snapshot with Python frames (simulated device, ctypes): Python first, glue folded
    'summary_mt_python': (['summary', 'mt_python.pickle'], {}),
    'peak_mt_python': (['peak', 'mt_python.pickle'], {}),
    'leaks_mt_python': (['leaks', 'mt_python.pickle'], {}),
    # pinned host memory (host_segments/host_traces): its own section, never in a device's figures
    'summary_torch_pinned': (['summary', 'torch_pinned_p4.pickle'], {}),
    'summary_torch_pinned_json': (['summary', '--json', 'torch_pinned_p4.pickle'], {}),
    'summary_torch_pinned_device0': (['summary', '--device', '0', 'torch_pinned_p4.pickle'], {}),
    'leaks_torch_pinned': (['leaks', 'torch_pinned_p4.pickle'], {}),
    'diff_torch_pinned': (['diff', 'torch_step.pickle', 'torch_pinned_p4.pickle'], STEP),
    'diff_torch_pinned_json': (['diff', '--json', 'torch_step.pickle', 'torch_pinned_p4.pickle'], STEP),
    'leaks_torch_oom': (['leaks', 'torch_oom_p4.pickle'], {}),
    'flamegraph_torch_oom': (['flamegraph', 'torch_oom_p4.pickle'], {}),
    'replay_capacity_recorded': (['replay', '--capacity', 'recorded', 'torch_oom_p4.pickle'], {}),
    'error_capacity_recorded_without_oom': (['replay', '--capacity', 'recorded', 'torch_step.pickle'], STEP),
    'error_gzip_file': (['summary', 'snap.pickle.gz'], {}),
    'error_lfs_pointer': (['summary', 'lfs.pickle'], {}),
    'error_device_not_in_file': (['summary', '--device', '7', 'torch_oom_p4.pickle'], {}),
    'error_bad_frames': (['peak', '--frames', 'some', 'torch_oom_p4.pickle'], {}),
    # peak
    'peak_torch': (['peak', 'torch_step.pickle'], STEP),
    'peak_torch_json': (['peak', '--json', 'torch_step.pickle'], STEP),
    'peak_mt_leak': (['peak', 'mt_leak.pickle'], {}),
    'peak_mt_nccl_json': (['peak', '--json', '--top', '3', 'mt_nccl.pickle'], {}),
    # leaks
    'leaks_torch_later': (['leaks', 'torch_later_p5.pickle'], {}),
    'leaks_torch_later_json': (['leaks', '--json', '--device', '0', 'torch_later_p5.pickle'], {}),
    'leaks_mt_leak': (['leaks', 'mt_leak.pickle'], {}),
    # diff
    'diff_torch': (['diff', 'torch_step.pickle', 'torch_later_p5.pickle'], STEP),
    'diff_torch_json': (['diff', '--json', 'torch_step.pickle', 'torch_later_p5.pickle'], STEP),
    'diff_torch_peak': (['diff', '--at', 'peak', '--device', '0', 'torch_step.pickle', 'torch_later_p5.pickle'], STEP),
    'diff_mt': (['diff', 'mt_loop_truncated.pickle', 'mt_leak.pickle'], {}),
    # flamegraph
    'flamegraph_torch_end': (['flamegraph', 'torch_step.pickle'], STEP),
    'flamegraph_torch_peak': (['flamegraph', '--at', 'peak', '--device', '0', 'torch_step.pickle'], STEP),
    'flamegraph_mt_leak_file': (['flamegraph', 'mt_leak.pickle', '-o', 'leak.folded'], {}),
    # speedscope's file format: the folded output's stacks and bytes, a profile per device
    'flamegraph_torch_oom_speedscope': (['flamegraph', '--format', 'speedscope', 'torch_oom_p4.pickle'], {}),
    'flamegraph_torch_oom_speedscope_all_frames': (['flamegraph', '--format', 'speedscope', '--frames', 'all',
                                                    'torch_oom_p4.pickle'], {}),
    'flamegraph_torch_peak_speedscope': (['flamegraph', '--format', 'speedscope', '--at', 'peak', 'torch_step.pickle'],
                                         STEP),
    'flamegraph_mt_nccl_speedscope_device1': (['flamegraph', '--format=speedscope', '--at', 'peak', '--device', '1',
                                               'mt_nccl.pickle'], {}),
    'flamegraph_mt_leak_speedscope_file': (['flamegraph', '--format', 'speedscope', '--json', 'mt_leak.pickle',
                                            '-o', 'leak.speedscope.json'], {}),
    'error_bad_format': (['flamegraph', '--format', 'svg', 'mt_leak.pickle'], {}),
    'help_flamegraph': (['flamegraph', '--help'], {}),
    # ranks
    'ranks': (['ranks', 'ranks'], {}),
    'ranks_json': (['ranks', '--json', 'ranks'], {}),
    'ranks_memtrace': (['ranks', 'ranks_mt'], {}),
    # merge (the output is checked, then summarized)
    'merge_torch_memtrace': (['merge', 'torch_step.pickle', 'memtrace_step.pickle', '-o', 'merged.pickle'], STEP),
    'merge_torch_memtrace_json': (['merge', '--json', 'torch_step.pickle', 'memtrace_step.pickle', '-o', 'merged.pickle'],
                                  STEP),
    'merge_torch_mt_nccl': (['merge', 'torch_step.pickle', 'mt_nccl.pickle', '-o', 'merged.pickle'], STEP),
    # newer PyTorch keys (annotate, user_metadata, external_annotations, host memory, ...) carried
    'merge_torch_newer_keys': (['merge', 'torch_newer_keys_p4.pickle', 'memtrace_step.pickle', '-o', 'merged.pickle'],
                               {}),
    # --by range (docs/ranges.md): memtrace's 'ranges' keys, ranges derived from PyTorch's
    # external_annotations (an END without START, a START never ended, markers out of order, scopes
    # that cross), and a file with neither; --by owner|stack pick one of the default groupings
    'summary_mt_ranges_by_range': (['summary', '--by', 'range', 'mt_ranges.pickle'], {}),
    'summary_mt_ranges_by_range_json': (['summary', '--json', '--by=range', 'mt_ranges.pickle'], {}),
    'summary_torch_ranges_by_range': (['summary', '--by', 'range', 'torch_ranges_p4.pickle'], {}),
    'summary_torch_no_ranges_by_range': (['summary', '--by', 'range', '--device', '1', 'torch_step.pickle'], STEP),
    'summary_mt_ranges_by_stack': (['summary', '--by', 'stack', '--device', '0', 'mt_ranges.pickle'], {}),
    'summary_mt_ranges_by_owner_json': (['summary', '--json', '--by', 'owner', '--device', '1', 'mt_ranges.pickle'], {}),
    'peak_mt_ranges_by_range': (['peak', '--by', 'range', 'mt_ranges.pickle'], {}),
    'peak_mt_ranges_by_range_json': (['peak', '--json', '--by', 'range', '--top', '3', 'mt_ranges.pickle'], {}),
    'peak_torch_ranges_by_range': (['peak', '--by', 'range', 'torch_ranges_p4.pickle'], {}),
    'peak_mt_ranges_by_owner': (['peak', '--by', 'owner', 'mt_ranges.pickle'], {}),
    'leaks_mt_ranges_later_by_range': (['leaks', '--by', 'range', 'mt_ranges_later.pickle'], {}),
    'leaks_torch_ranges_by_range_json': (['leaks', '--json', '--by', 'range', 'torch_ranges_p4.pickle'], {}),
    'leaks_mt_ranges_by_stack': (['leaks', '--by', 'stack', '--device', '0', 'mt_ranges.pickle'], {}),
    'diff_mt_ranges_by_range': (['diff', '--by', 'range', 'mt_ranges.pickle', 'mt_ranges_later.pickle'], {}),
    'diff_mt_ranges_by_range_json': (['diff', '--json', '--by', 'range', '--device', '0', 'mt_ranges.pickle',
                                      'mt_ranges_later.pickle'], {}),
    'diff_torch_ranges_by_range_peak': (['diff', '--by', 'range', '--at', 'peak', 'torch_ranges_p4.pickle',
                                         'mt_ranges.pickle'], {}),
    'flamegraph_mt_ranges_by_range': (['flamegraph', '--by', 'range', 'mt_ranges.pickle'], {}),
    'flamegraph_torch_ranges_by_range_peak': (['flamegraph', '--by', 'range', '--at', 'peak', '--device', '0',
                                               'torch_ranges_p4.pickle'], {}),
    'flamegraph_mt_ranges_by_range_speedscope': (['flamegraph', '--format', 'speedscope', '--by', 'range',
                                                  'mt_ranges.pickle'], {}),
    'flamegraph_mt_ranges_by_owner': (['flamegraph', '--by', 'owner', '--device', '0', 'mt_ranges.pickle'], {}),
    'flamegraph_mt_ranges_by_range_file': (['flamegraph', '--by', 'range', '--json', 'mt_ranges.pickle', '-o',
                                            'ranges.folded'], {}),
    'error_bad_by': (['leaks', '--by', 'phase', 'mt_ranges.pickle'], {}),
    'error_bad_by_replay': (['replay', '--by', 'range', 'mt_ranges.pickle'], {}),
    # bad input and bad usage: exit status 2, one line
    'error_not_a_pickle': (['summary', 'notes.txt'], {}),
    'error_truncated': (['peak', 'truncated.pickle'], {}),
    'error_missing_file': (['leaks', 'no_such_file.pickle'], {}),
    'error_no_args': (['summary'], {}),
    'error_bad_option': (['peak', '--bogus', 'mt_leak.pickle'], {}),
    'error_diff_one_file': (['diff', 'mt_leak.pickle'], {}),
    'error_merge_without_output': (['merge', 'torch_step.pickle', 'mt_leak.pickle'], STEP),
    'error_bad_at': (['flamegraph', '--at', 'middle', 'mt_leak.pickle'], {}),
    'error_ranks_empty_dir': (['ranks', 'empty'], {}),
    'error_inconsistent': (['summary', 'inconsistent.pickle'], {}),
    'error_negative_size': (['peak', 'negative.pickle'], {}),
    'error_replay_inconsistent': (['replay', 'inconsistent.pickle'], {}),
    'lenient_inconsistent': (['summary', '--lenient', 'inconsistent.pickle'], {}),
    'help_summary': (['summary', '--help'], {}),
}
# Files whose content a case also shows (after the command ran).
SHOW_FILE = {'flamegraph_mt_leak_file': 'leak.folded', 'flamegraph_mt_leak_speedscope_file': 'leak.speedscope.json',
             'flamegraph_mt_ranges_by_range_file': 'ranges.folded'}
SUMMARIZE = ('merge_torch_memtrace', 'merge_torch_mt_nccl', 'merge_torch_newer_keys')
# The same snapshot pickled with protocols 2, 4 and 5 must read the same.
SAME_AS = {'summary_torch_p2': 'summary_torch_p5', 'summary_torch_p4': 'summary_torch_p5'}


def prepare(work, links):
    for name in os.listdir(DATA):
        os.symlink(os.path.join(DATA, name), os.path.join(work, name))
    for name, target in links.items():
        p = os.path.join(work, name)
        if os.path.lexists(p):
            os.remove(p)
        os.symlink(os.path.join(DATA, target), p)
    with open(os.path.join(work, 'notes.txt'), 'w') as f:
        f.write('not a snapshot\n')
    with open(os.path.join(DATA, 'torch_step_p5.pickle'), 'rb') as f:
        data = f.read()
    with open(os.path.join(work, 'truncated.pickle'), 'wb') as f:
        f.write(data[:len(data) // 2])
    # What people hand memtrace by mistake: a compressed snapshot, a Git LFS pointer.
    with open(os.path.join(work, 'snap.pickle.gz'), 'wb') as f:
        f.write(gzip.compress(data, mtime=0))
    with open(os.path.join(work, 'lfs.pickle'), 'w') as f:
        f.write('version https://git-lfs.github.com/spec/v1\noid sha256:' + '0' * 64 + '\nsize 123456\n')
    os.mkdir(os.path.join(work, 'empty'))
    # Files that load but that no allocator can produce: a block larger than its segment and a
    # segment written twice; a negative segment size.
    snap = pickle.loads(data)
    segs = snap['segments']
    segs[0]['blocks'][0]['size'] = segs[0]['total_size'] * 2
    segs.append(copy.deepcopy(segs[1]))
    with open(os.path.join(work, 'inconsistent.pickle'), 'wb') as f:
        pickle.dump(snap, f, protocol=4)
    snap = pickle.loads(data)
    snap['segments'][0]['total_size'] = -4096
    with open(os.path.join(work, 'negative.pickle'), 'wb') as f:
        pickle.dump(snap, f, protocol=4)


def speedscope_problems(memtrace, work, argv, text):
    """A speedscope file (one line of JSON) must hold what the folded output of the same command
    holds: the same stacks (frame names joined as folded text joins them) with the same bytes,
    summed over the devices' profiles, in bytes. Returns (the file indented, for the golden; problems)."""
    problems = []
    if text.count('\n') != 1 or not text.endswith('\n'):
        problems.append('the speedscope file is not one line')
    doc = json.loads(text)
    if doc.get('$schema') != 'https://www.speedscope.app/file-format-schema.json':
        problems.append('no speedscope $schema')
    frames = doc['shared']['frames']
    if len({json.dumps(f, sort_keys=True) for f in frames}) != len(frames):
        problems.append('a frame is in the shared table twice')
    got = {}
    for prof in doc['profiles']:
        if prof['type'] != 'sampled' or prof['unit'] != 'bytes' or len(prof['samples']) != len(prof['weights']):
            problems.append(f'profile {prof["name"]}: not a sampled profile in bytes')
        if prof['endValue'] - prof['startValue'] != sum(prof['weights']):
            problems.append(f'profile {prof["name"]}: endValue is not the sum of the weights')
        for sample, weight in zip(prof['samples'], prof['weights']):
            names = [frames[i]['name'].replace(';', ',').replace('\n', ' ').replace('\r', ' ') for i in sample]
            got[';'.join(names)] = got.get(';'.join(names), 0) + weight
    folded_argv = [a for a in argv if a not in ('--format', 'speedscope', '--format=speedscope', '--json')]
    if '-o' in folded_argv:
        del folded_argv[folded_argv.index('-o'):folded_argv.index('-o') + 2]
    f = subprocess.run([memtrace] + folded_argv, cwd=work, stdout=subprocess.PIPE, text=True, timeout=60)
    want = {}
    for line in f.stdout.splitlines():
        stack, _, count = line.rpartition(' ')
        want[stack] = want.get(stack, 0) + int(count)
    if got != want:
        problems.append(f'the speedscope file holds other stacks or bytes than the folded output:\n'
                        f'  speedscope {got}\n  folded     {want}')
    return json.dumps(doc, indent=1, ensure_ascii=False) + '\n', problems


def run_case(name, memtrace, checker):
    argv, links = CASES[name]
    work = tempfile.mkdtemp(prefix='memtrace-golden-')
    try:
        prepare(work, links)
        # Reports fit their lines to $COLUMNS when stdout is not a terminal: the goldens are at the
        # fixed default width whatever the shell running them exports.
        env = {k: v for k, v in os.environ.items() if k != 'COLUMNS'}
        p = subprocess.run([memtrace] + argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors='replace', timeout=60, env=env)
        problems = []
        stdout = p.stdout
        speedscope = p.returncode == 0 and any(a in ('speedscope', '--format=speedscope') for a in argv)
        if speedscope and name not in SHOW_FILE:
            stdout, found = speedscope_problems(memtrace, work, argv, stdout)
            problems += found
        text = f'$ memtrace {" ".join(argv)}\nexit {p.returncode}\n--- stdout\n{stdout}--- stderr\n{p.stderr}'
        if name in SHOW_FILE:
            with open(os.path.join(work, SHOW_FILE[name])) as f:
                shown = f.read()
            if speedscope:
                shown, found = speedscope_problems(memtrace, work, argv, shown)
                problems += found
            text += f'--- {SHOW_FILE[name]}\n{shown}'
        if name.startswith('merge_'):
            out = os.path.join(work, 'merged.pickle')
            with open(out, 'rb') as f:
                pickle.load(f)  # Python reads it
            c = subprocess.run([sys.executable, checker, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=60)
            if c.returncode != 0:
                problems.append(f'check_snapshot.py on the merged file:\n{c.stdout}')
            if name in SUMMARIZE:
                s = subprocess.run([memtrace, 'summary', 'merged.pickle'], cwd=work, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=60)
                text += f'--- memtrace summary merged.pickle (exit {s.returncode})\n{s.stdout}'
        if name.startswith('error_'):
            if p.returncode != 2:
                problems.append(f'exit status {p.returncode}, expected 2')
            if not p.stderr.startswith('memtrace '):
                problems.append('stderr does not start with "memtrace "')
            if not name.startswith(('error_no_args', 'error_bad', 'error_diff', 'error_merge')) and \
                    p.stderr.count('\n') != 1:
                problems.append('a bad file must give exactly one line on stderr')
        return text, problems
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--memtrace', required=True)
    ap.add_argument('--checker', required=True)
    ap.add_argument('--update', action='store_true')
    ap.add_argument('cases', nargs='*')
    a = ap.parse_args()
    if not os.path.isfile(a.memtrace):
        print(f'{a.memtrace} is not built')
        return 77
    names = a.cases or list(CASES)
    failed = 0
    texts = {}
    for name in sorted(names, key=lambda n: n in SAME_AS):
        text, problems = run_case(name, os.path.abspath(a.memtrace), os.path.abspath(a.checker))
        texts[name] = text
        other = SAME_AS.get(name)
        if other in texts and texts[other] != text:
            problems.append(f'output differs from {other} (same snapshot, other pickle protocol)')
        path = os.path.join(EXPECTED, name + '.txt')
        if a.update:
            with open(path, 'w') as f:
                f.write(text)
        else:
            try:
                with open(path) as f:
                    want = f.read()
            except OSError:
                want = None
            if want is None:
                problems.append(f'no expected file {path} (run with --update)')
            elif want != text:
                diff = ''.join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), 'expected', 'got'))
                problems.append(f'output differs from {path}:\n{diff}')
        status = 'FAIL' if problems else ('updated' if a.update else 'ok')
        print(f'{status:8} {name}')
        for pr in problems:
            print('    ' + pr.replace('\n', '\n    '))
        failed += bool(problems)
    print(f'{len(names) - failed}/{len(names)} golden cases pass')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
