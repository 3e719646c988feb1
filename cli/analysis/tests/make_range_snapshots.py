#!/usr/bin/env python3
"""Writes the golden tests' snapshots with ranges into data/ (run once; the files are committed).

Two shapes of one training job (docs/ranges.md, "What a snapshot carries"):

* mt_ranges.pickle, mt_ranges_later.pickle: what memtrace writes when the program marks its phases
  with NVTX: every entry and block made inside a range carries `ranges` (outermost first) and, with
  no other note, `user_metadata` = the ranges joined by ' > '; an `annotate` entry for an nvtxMark;
  `external_annotations` with each range's START and END. Equal range lists are one list object
  (pickle's memo), as memtrace's writer shares them. The later file is the same job a step later:
  backward grew and kept a temporary, the optimizer's state appeared.
* torch_ranges_p4.pickle: what PyTorch writes for a program with record_function scopes: no
  `ranges` keys, only `external_annotations` (name, stage, device, time_us) for the reader to derive
  ranges from, with the untidy parts real files have: an END whose START is older than the history,
  a START never ended, markers out of list order, a second device, markers the reader must skip.

Plain python3, deterministic; the helpers are make_pytorch_snapshots.py's.

    python3 make_range_snapshots.py [OUT_DIR]
"""
import os
import pickle
import sys

from make_pytorch_snapshots import MAIN, MODULE, MiB, T0, block, ev, fr, segment, settings, stack

S_EMBED = stack(fr('embedding', 'model.py', 12), fr('forward', 'model.py', 40), fr('step', 'train.py', 60), MAIN, MODULE)
S_LAYER = stack(fr('linear', 'model.py', 21), fr('forward', 'model.py', 44), fr('step', 'train.py', 60), MAIN, MODULE)
S_ATTN = stack(fr('attention', 'model.py', 17), fr('forward', 'model.py', 44), fr('step', 'train.py', 60), MAIN, MODULE)
S_BWD = stack(fr('backward', 'torch/autograd/__init__.py', 251), fr('step', 'train.py', 61), MAIN, MODULE)
S_OPT = stack(fr('adam_step', 'torch/optim/adam.py', 400), fr('step', 'train.py', 65), MAIN, MODULE)
S_INIT = stack(fr('load_weights', 'train.py', 20), MAIN, MODULE)
S_NCCL = stack(fr('ncclMemAlloc', 'libnccl.so.2', 0), fr('init_process_group', 'train.py', 30), MAIN, MODULE)
S_MARK = stack(fr('nvtxMarkA', 'libnvToolsExt.so.1', 0), fr('step', 'train.py', 59), MAIN, MODULE)

_ranges = {}


def rng(*names):
    """A range stack, outermost first; the same names give the same list object (memtrace shares them)."""
    if names not in _ranges:
        _ranges[names] = list(names)
    return _ranges[names]


def mt_settings():
    st = settings()
    st['memtrace'] = {'version': '0.1.0', 'pid': 5151, 'exe': '/usr/bin/python3', 'host': 'node3', 'rank': '0',
                      'reason': 'exit', 'entries_dropped': 0, 'allocator': 'passthrough'}
    return st


def tag(d, ranges):
    """Marks an entry or block as made inside `ranges`, as memtrace writes it."""
    if ranges:
        d['ranges'] = ranges
        if not d.get('user_metadata'):
            d['user_metadata'] = ' > '.join(ranges)
    return d


def mt_ev(action, addr, size, t, frames, cat, ranges=None):
    e = ev(action, addr, size, t, frames)
    e['category'] = cat
    return tag(e, ranges)


def mt_alloc(addr, size, t, frames, cat, ranges=None):
    return [mt_ev('segment_alloc', addr, size, t, frames, cat, ranges), mt_ev('alloc', addr, size, t, frames, cat, ranges)]


def mt_free(addr, size, t, frames, cat, ranges=None):
    # A free's entries carry the allocation's stack and the ranges open when the free happened.
    return [mt_ev('free_requested', addr, size, t, frames, cat, ranges),
            mt_ev('free_completed', addr, size, t, frames, cat, ranges),
            mt_ev('segment_free', addr, size, t, frames, cat, ranges)]


def mt_block(size, frames, ranges=None):
    return tag(block(size, size, 'active_allocated', frames), ranges)


def mt_segment(device, address, frames, size, ranges=None):
    return segment(device, address, [mt_block(size, frames, ranges)], frames=frames)


def markers(spans, device=0):
    """external_annotations for (name, start, end) spans, oldest first, as memtrace writes them."""
    out = []
    for name, start, end in spans:
        out.append({'name': name, 'stage': 'START', 'device': device, 'time_us': T0 + start})
        out.append({'name': name, 'stage': 'END', 'device': device, 'time_us': T0 + end})
    out.sort(key=lambda m: m['time_us'])
    return out


W = 0x7f1000000000      # weights, loaded before any range
NCCL = 0x7f1010000000   # NCCL's buffer, made outside any range
E = 0x7f1020000000      # embedding output (step 7 > forward)
L0 = 0x7f1030000000     # layer.0 activations
L1 = 0x7f1040000000     # layer.1 activations
ATT = 0x7f1050000000    # layer.1 attention scratch, freed inside the range
G = 0x7f1060000000      # gradients (step 7 > backward)
TMP = 0x7f1070000000    # backward temporary
OPT = 0x7f1080000000    # optimizer state (later file)
D1 = 0x7e1000000000     # device 1: its share of the forward


def mt_ranges(later=False):
    step = 'step 8' if later else 'step 7'
    fwd, l0, l1 = rng(step, 'forward'), rng(step, 'forward', 'layer.0'), rng(step, 'forward', 'layer.1')
    bwd = rng(step, 'backward')
    mark = {'action': 'annotate', 'addr': 0, 'size': 0, 'stream': 0, 'time_us': T0 + 99, 'compile_context': '',
            'user_metadata': 'loss 2.31', 'category': 'unknown', 'frames': S_MARK, 'ranges': fwd}
    g_size = 24 * MiB if later else 16 * MiB
    d0 = [*mt_alloc(W, 32 * MiB, 10, S_INIT, 'torch'),
          *mt_alloc(NCCL, 8 * MiB, 20, S_NCCL, 'nccl'),
          *mt_alloc(E, 2 * MiB, 110, S_EMBED, 'torch', fwd),
          *mt_alloc(L0, 6 * MiB, 130, S_LAYER, 'torch', l0),
          *mt_alloc(L1, 6 * MiB, 150, S_LAYER, 'torch', l1),
          *mt_alloc(ATT, 4 * MiB, 160, S_ATTN, 'cublas', l1),
          *mt_free(ATT, 4 * MiB, 170, S_ATTN, 'cublas', l1),
          mark,
          *mt_alloc(G, g_size, 210, S_BWD, 'torch', bwd),
          *mt_alloc(TMP, 3 * MiB, 220, S_BWD, 'torch', bwd)]
    if not later:
        d0 += mt_free(TMP, 3 * MiB, 230, S_BWD, 'torch', bwd)
    else:
        d0 += mt_alloc(OPT, 16 * MiB, 310, S_OPT, 'torch', rng('optimizer'))
    d0.sort(key=lambda e: e['time_us'])
    d1 = mt_alloc(D1, 4 * MiB, 120, S_LAYER, 'torch', fwd)
    segs = [mt_segment(0, W, S_INIT, 32 * MiB), mt_segment(0, NCCL, S_NCCL, 8 * MiB),
            mt_segment(0, E, S_EMBED, 2 * MiB, fwd), mt_segment(0, L0, S_LAYER, 6 * MiB, l0),
            mt_segment(0, L1, S_LAYER, 6 * MiB, l1), mt_segment(0, G, S_BWD, g_size, bwd),
            mt_segment(1, D1, S_LAYER, 4 * MiB, fwd)]
    if later:
        segs += [mt_segment(0, TMP, S_BWD, 3 * MiB, bwd), mt_segment(0, OPT, S_OPT, 16 * MiB, rng('optimizer'))]
    segs.sort(key=lambda s: (s['device'], s['address']))
    spans = [(step, 100, 300), ('forward', 105, 200), ('layer.0', 125, 140), ('layer.1', 145, 180),
             ('backward', 205, 240)]
    if later:
        spans.append(('optimizer', 305, 320))
    notes = markers(spans) + markers([(step, 100, 300), ('forward', 105, 200)], device=1)
    notes.sort(key=lambda m: m['time_us'])
    return {'segments': segs, 'device_traces': [d0, d1], 'allocator_settings': mt_settings(),
            'external_annotations': notes}


def torch_ranges():
    """PyTorch's own snapshot of a step inside record_function scopes: ranges only as markers."""
    d0 = [ev('segment_alloc', W, 32 * MiB, 10, S_INIT),
          ev('alloc', W, 32 * MiB, 11, S_INIT),                  # inside 'load' (END without START)
          ev('segment_alloc', E, 20 * MiB, 110, S_EMBED),
          ev('alloc', E, 2 * MiB, 110, S_EMBED),                 # the microsecond 'forward' starts: inside
          ev('alloc', E + 2 * MiB, 6 * MiB, 130, S_LAYER),       # forward > layer.0
          ev('alloc', E + 8 * MiB, 4 * MiB, 160, S_ATTN),        # forward > layer.1 > aten::mm (crossing END below)
          ev('free_requested', E + 8 * MiB, 4 * MiB, 170, S_ATTN),
          ev('free_completed', E + 8 * MiB, 4 * MiB, 171, S_ATTN),
          ev('alloc', E + 8 * MiB, 2 * MiB, 185, S_ATTN),        # forward > aten::mm: layer.1 ended first
          ev('alloc', E + 12 * MiB, 5 * MiB, 200, S_LAYER),      # the microsecond 'forward' ends: outside
          ev('alloc', E + 17 * MiB, 3 * MiB, 260, S_BWD)]        # backward, never ended
    d1 = [ev('segment_alloc', D1, 4 * MiB, 115, S_LAYER), ev('alloc', D1, 4 * MiB, 120, S_LAYER)]
    segs = [segment(0, W, [block(32 * MiB, 32 * MiB, 'active_allocated', S_INIT)], frames=S_INIT),
            segment(0, E, [block(2 * MiB, 2 * MiB, 'active_allocated', S_EMBED),
                           block(6 * MiB, 6 * MiB, 'active_allocated', S_LAYER),
                           block(2 * MiB, 2 * MiB, 'active_allocated', S_ATTN),
                           block(2 * MiB, 0, 'inactive', []),
                           block(5 * MiB, 5 * MiB, 'active_allocated', S_LAYER),
                           block(3 * MiB, 3 * MiB, 'active_allocated', S_BWD)], frames=S_EMBED),
            segment(1, D1, [block(4 * MiB, 4 * MiB, 'active_allocated', S_LAYER)], frames=S_LAYER)]
    M = lambda name, stage, t, device=0: {'name': name, 'stage': stage, 'device': device, 'time_us': T0 + t}
    notes = [M('load', 'END', 12),                      # its START is older than the history
             M('forward', 'START', 110),
             M('layer.0', 'START', 120), M('layer.0', 'END', 140),
             M('layer.1', 'START', 150),
             M('aten::mm', 'END', 190),                 # listed before its START: out of order
             M('aten::mm', 'START', 155),
             M('layer.1', 'END', 180),                  # ends while aten::mm, opened inside it, is open
             M('forward', 'END', 200),
             M('backward', 'START', 250),               # never ended: open to the end of the history
             M('forward', 'START', 100, 1), M('forward', 'END', 200, 1),
             {'name': 'profiler step', 'device': 0, 'time_us': T0 + 1},   # no stage: skipped
             M('other device', 'START', 5, 7)]                            # no device 7 in the file: skipped
    return {'segments': segs, 'device_traces': [d0, d1], 'allocator_settings': settings(),
            'external_annotations': notes}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data')

    def dump(name, obj):
        _ranges.clear()
        with open(os.path.join(out, name), 'wb') as f:
            pickle.dump(obj, f, protocol=4)

    dump('mt_ranges.pickle', mt_ranges())
    _ranges.clear()
    dump('mt_ranges_later.pickle', mt_ranges(later=True))
    dump('torch_ranges_p4.pickle', torch_ranges())


if __name__ == '__main__':
    main()
