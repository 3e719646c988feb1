#!/usr/bin/env python3
"""Writes snapshot pickles in PyTorch's shape (what torch.cuda.memory._dump_snapshot writes) for the
reader's tests: python3 make_pytorch_pickles.py OUTDIR

  pytorch_p{0..5}.pickle   the same snapshot at every pickle protocol; frame dicts and frame lists
                           are shared objects (as PyTorch deduplicates them), so the pickler memoizes
  pytorch_unshared.pickle  the same data with every frame dict and list a separate object
  batched.pickle           3000 trace entries (several APPENDS batches, memo indices past 255)
  legacy_list.pickle       the bare list of segments (torch.cuda.memory_snapshot())
  legacy_history.pickle    pre-2023 blocks: no 'frames', a 'history' list instead

The C++ test (reader_pickle_test.cpp) knows these values; change both together.
"""
import json
import os
import pickle
import sys

BASE = 0x7F3A00000000        # > 2^31: LONG1 at every binary protocol
BASE1 = 0x7F3B00000000
T0 = 1767225600000000        # time_us, > 2^32
MIB = 1 << 20

FR_FWD = {'filename': 'train.py', 'line': 42, 'name': 'forward'}
FR_MOD = {'filename': 'train.py', 'line': 7, 'name': '<module>'}
FR_LAYER = {'filename': 'model.py', 'line': 300, 'name': 'layer'}
STACK = [FR_FWD, FR_MOD]                 # innermost first
OTHER = [FR_LAYER, FR_FWD, FR_MOD]


def entry(action, addr, size, t, frames, **extra):
    e = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': t,
         'compile_context': '', 'user_metadata': ''}
    if addr is None:
        del e['addr']
    if frames is not None:
        e['frames'] = frames
    e.update(extra)
    return e


def snapshot():
    return {
        'segments': [
            {'device': 0, 'address': BASE, 'total_size': 2 * MIB, 'allocated_size': 512,
             'active_size': 1536, 'requested_size': 1400, 'stream': 0, 'segment_type': 'small',
             'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': STACK,
             'blocks': [
                 {'address': BASE, 'size': 512, 'requested_size': 400,
                  'state': 'active_allocated', 'frames': STACK},
                 {'address': BASE + 512, 'size': 1024, 'requested_size': 1000,
                  'state': 'active_pending_free', 'frames': OTHER},
                 {'address': BASE + 1536, 'size': 2 * MIB - 1536, 'requested_size': 0,
                  'state': 'inactive', 'frames': []},
             ]},
            {'device': 1, 'address': BASE1, 'total_size': 20 * MIB, 'allocated_size': 20 * MIB,
             'active_size': 20 * MIB, 'requested_size': 20 * MIB - 5, 'stream': 2**64 - 1,
             'segment_type': 'large', 'segment_pool_id': (1, 7), 'is_expandable': True,
             'frames': OTHER,
             'blocks': [{'address': BASE1, 'size': 20 * MIB, 'requested_size': 20 * MIB - 5,
                         'state': 'active_allocated', 'frames': OTHER}]},
        ],
        'device_traces': [
            [
                entry('segment_alloc', BASE, 2 * MIB, T0, STACK),
                entry('alloc', BASE, 400, T0 + 10, STACK),
                entry('alloc', BASE + 512, 1000, T0 + 20, OTHER, category='weights'),
                entry('free_requested', BASE + 512, 1000, T0 + 30, OTHER),
                entry('oom', None, 2**34, T0 + 40, None, device_free=2**33 + 3),
                entry('annotate', BASE, 0, T0 + 50, [], user_metadata='note'),
            ],
            [
                entry('segment_map', BASE1, 20 * MIB, T0 + 60, OTHER),
                entry('alloc', BASE1, 20 * MIB - 5, T0 + 70, OTHER),
            ],
        ],
        'allocator_settings': {
            'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True',
            'max_split_size': -1,
            'garbage_collection_threshold': 0.0,
            'expandable_segments': True,
            'pinned_num_register_threads': 1,
            'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)},
        },
        'external_annotations': [{'name': 'step', 'stage': 'START', 'device': 0, 'time_us': T0}],
    }


def unshared(obj):
    # Every container a new object; tuples become lists, which the reader treats alike.
    return json.loads(json.dumps(obj))


def batched():
    stacks = [STACK, OTHER, [FR_MOD]]
    trace = [entry('alloc', BASE + 512 * i, i, T0 + i, stacks[i % 3],
                   compile_context='ctx%d' % (i % 300))
             for i in range(3000)]
    return {'segments': [], 'device_traces': [trace]}


def legacy_history():
    return [{'device': 0, 'address': BASE, 'total_size': 1024, 'stream': 0,
             'blocks': [{'size': 1024, 'state': 'active_allocated',
                         'history': [{'addr': BASE, 'real_size': 1000, 'frames': STACK}]}]}]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def dump(name, obj, protocol=4):
        with open(os.path.join(out, name), 'wb') as f:
            pickle.dump(obj, f, protocol=protocol)

    for p in range(6):
        dump('pytorch_p%d.pickle' % p, snapshot(), p)
    dump('pytorch_unshared.pickle', unshared(snapshot()))
    dump('batched.pickle', batched(), 2)
    dump('legacy_list.pickle', snapshot()['segments'])
    dump('legacy_history.pickle', legacy_history())


if __name__ == '__main__':
    main()
