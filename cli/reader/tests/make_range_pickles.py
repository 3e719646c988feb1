#!/usr/bin/env python3
"""Writes snapshot pickles with ranges for the reader's tests (ranges_test.cpp knows these values;
change both together): python3 make_range_pickles.py OUTDIR

  keys.pickle            'ranges' lists on entries and blocks: a shared list, an equal list that is
                         another object, None, [], a tuple, a 300-deep list, a list of 100,000 names
                         shared by 1000 entries
  markers.pickle         no 'ranges' keys: PyTorch's external_annotations, with every untidy case
                         the derivation handles (see range_derivation.hpp)
  memtrace_markers.pickle memtrace's own file (allocator_settings['memtrace']) with markers and no
                         'ranges' keys: nothing is derived
  keys_and_markers.pickle 'ranges' keys and markers that disagree: the keys win
  bad_not_list.pickle, bad_item.pickle, bad_block.pickle: a 'ranges' value of the wrong type
"""
import os
import pickle
import sys

T0 = 1767225600000000
MIB = 1 << 20
A = 0x7F3A00000000
STACK = [{'filename': 'train.py', 'line': 42, 'name': 'forward'}]


def ev(action, addr, size, t, **kw):
    e = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': T0 + t, 'frames': STACK}
    e.update(kw)
    return e


def seg(device, addr, blocks):
    total = sum(b['size'] for b in blocks)
    return {'device': device, 'address': addr, 'total_size': total, 'stream': 0, 'segment_type': 'large',
            'blocks': blocks}


def blk(size, state='active_allocated', **kw):
    b = {'size': size, 'requested_size': size, 'state': state, 'frames': STACK}
    b.update(kw)
    return b


def marker(name, stage, t, device=0):
    return {'name': name, 'stage': stage, 'device': device, 'time_us': T0 + t}


def keys():
    shared = ['step', 'forward']
    deep = [f'r{i}' for i in range(300)]
    wide = [f'w{i}' for i in range(100000)]
    d0 = [ev('alloc', A, MIB, 1, ranges=shared, user_metadata='step > forward'),
          ev('alloc', A + MIB, MIB, 2, ranges=shared),
          ev('alloc', A + 2 * MIB, MIB, 3, ranges=['step', 'forward']),  # equal, not the same object
          ev('alloc', A + 3 * MIB, MIB, 4, ranges=None),
          ev('alloc', A + 4 * MIB, MIB, 5, ranges=[]),
          ev('alloc', A + 5 * MIB, MIB, 6, ranges=('step', 'backward')),
          ev('alloc', A + 6 * MIB, MIB, 7, ranges=deep),
          ev('alloc', A + 7 * MIB, MIB, 8)]
    d0 += [ev('free_requested', A + 8 * MIB, MIB, 9 + i, ranges=wide) for i in range(1000)]
    blocks = [blk(MIB, ranges=shared), blk(MIB), blk(MIB, ranges=['step']), blk(5 * MIB, 'inactive')]
    return {'segments': [seg(0, A, blocks)], 'device_traces': [d0], 'external_annotations': []}


def markers():
    d0 = [ev('alloc', A, MIB, 5),                 # before every marker: no range
          ev('alloc', A + MIB, MIB, 10),          # the microsecond 'outer' starts: inside
          ev('alloc', A + 2 * MIB, MIB, 25),      # outer > inner
          ev('alloc', A + 3 * MIB, MIB, 35),      # outer > inner > cross (inner's END, listed first, is at 40)
          ev('alloc', A + 4 * MIB, MIB, 45),      # outer > cross (inner ended, cross opened inside it)
          ev('alloc', A + 5 * MIB, MIB, 50),      # the microsecond 'outer' ends: cross alone
          ev('alloc', A + 6 * MIB, MIB, 70),      # open: never ended
          ev('free_requested', A + 6 * MIB, MIB, 80),
          ev('alloc', A + 6 * MIB, MIB, 90)]      # the block's alloc: the last one at its address
    d1 = [ev('alloc', A + 16 * MIB, MIB, 15)]
    notes = [marker('inner', 'END', 40),
             marker('outer', 'START', 10),
             marker('stale', 'END', 12),          # its START is older than the history
             marker('inner', 'START', 20),
             marker('cross', 'START', 30),
             marker('outer', 'END', 50),
             marker('open', 'START', 60),
             marker('cross', 'END', 60),
             marker('d1', 'START', 14, device=1),
             {'name': 'no stage', 'device': 0, 'time_us': T0 + 1},
             {'name': 'no time', 'stage': 'START', 'device': 0},
             {'name': 7, 'stage': 'START', 'device': 0, 'time_us': T0 + 1},
             {'name': 'other stage', 'stage': 'MARK', 'device': 0, 'time_us': T0 + 1},
             {'name': 'far device', 'stage': 'START', 'device': 9, 'time_us': T0 + 1},
             'not a dict',
             {'name': 'no device', 'stage': 'START', 'time_us': T0 + 88}]  # device 0
    blocks = [blk(MIB) for _ in range(7)] + [blk(9 * MIB, 'inactive')]
    return {'segments': [seg(0, A, blocks), seg(1, A + 16 * MIB, [blk(MIB)])], 'device_traces': [d0, d1],
            'external_annotations': notes}


def memtrace_markers():
    s = markers()
    s['allocator_settings'] = {'memtrace': {'version': '0.1.0', 'pid': 1, 'reason': 'exit'}}
    return s


def keys_and_markers():
    s = markers()
    s['device_traces'][0][1]['ranges'] = ['from key']
    return s


def main():
    out = sys.argv[1]

    def dump(name, obj):
        with open(os.path.join(out, name), 'wb') as f:
            pickle.dump(obj, f, protocol=4)

    dump('keys.pickle', keys())
    dump('markers.pickle', markers())
    dump('memtrace_markers.pickle', memtrace_markers())
    dump('keys_and_markers.pickle', keys_and_markers())
    bad = keys()
    bad['device_traces'][0][2]['ranges'] = 5
    dump('bad_not_list.pickle', bad)
    bad = keys()
    bad['device_traces'][0][2]['ranges'] = ['step', 3]
    dump('bad_item.pickle', bad)
    bad = keys()
    bad['segments'][0]['blocks'][1]['ranges'] = 'step'
    dump('bad_block.pickle', bad)


if __name__ == '__main__':
    main()
