#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_reader.cpp: python3 make_seeds.py [OUTDIR] (default: ./corpus).

Small snapshots in PyTorch's shape at every pickle protocol (from the reader tests' generator), the
legacy shapes, a short multi-batch trace, every value kind in allocator_settings, and a few
hand-written opcode sequences the fuzzer would take long to find (memo far indices, LONG4,
protocol-0 text forms, whitelisted bytes/set globals). memtrace_writer.pkl was written by
memtrace's own builder (output::build_snapshot of a 6-entry, 2-device StateCopy with an oom entry,
as in cli/reader/tests/memtrace_writer_test.cpp) and found-*.pkl are fuzzer finds; both are kept as is.
"""
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'reader', 'tests'))
import make_pytorch_pickles as m  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, 'corpus')
    os.makedirs(out, exist_ok=True)

    def dump(name, obj, protocol):
        with open(os.path.join(out, name), 'wb') as f:
            pickle.dump(obj, f, protocol=protocol)

    def raw(name, data):
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)

    for p in range(6):
        dump('pytorch_p%d.pkl' % p, m.snapshot(), p)
    dump('pytorch_unshared.pkl', m.unshared(m.snapshot()), 4)
    dump('legacy_list.pkl', m.snapshot()['segments'], 2)
    dump('legacy_history.pkl', m.legacy_history(), 3)
    short = {'segments': [], 'device_traces': [[m.entry('alloc', i * 512, i, i, [m.FR_FWD])
                                                for i in range(1100)]]}
    dump('batched_p2.pkl', short, 2)
    values = [0, -1, 2**31, 2**63, 2**64 - 1, 2**64, -2**70, True, None, 0.5, 'x' * 300, b'by', (1,),
              (1, 2, 3, 4), {1, 2}, frozenset([3]), bytearray(b'ab'), [[[]]], {'a': {'b': 1}}]
    settings = {'v%d' % i: v for i, v in enumerate(values)}
    for p in (0, 1, 2, 5):
        dump('values_p%d.pkl' % p, {'segments': [], 'device_traces': [], 'allocator_settings': settings}, p)

    sbu = lambda s: b'\x8c' + bytes([len(s)]) + s.encode()
    raw('memo_far.pkl', b'\x80\x04]r\xf0\xff\xff\xff(j\xf0\xff\xff\xffK\x01e.')
    raw('long4.pkl', b'\x80\x02\x8b\x0a\x00\x00\x00' + b'\xff' * 10 + b'.')
    raw('text_forms.pkl', b"(dp0\nVsegments\np1\n(lp2\nsVdevice_traces\np3\n(lp4\n(lp5\n(dp6\n"
                             b"Vaction\np7\nValloc\np8\nsVsize\np9\nL123L\nsS'cat\\x41\\n'\nI01\nsaas.")
    raw('entry_minimal.pkl', b'\x80\x04}(' + sbu('segments') + b']' + sbu('device_traces') + b']]}(' +
        sbu('action') + sbu('oom') + sbu('device_free') + b'\x8a\x09' + b'\x00' * 7 + b'\x80\x00' + b'ua' + b'au.')


if __name__ == '__main__':
    main()
