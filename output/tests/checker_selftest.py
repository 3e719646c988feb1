"""Self-test of check_snapshot.py: each broken snapshot must be reported, the good one must pass."""
import copy
import pickle
import sys

sys.path.insert(0, sys.argv[1])
import check_snapshot  # noqa: E402

FR = {'filename': 'a.py', 'line': 1, 'name': 'f'}
ST = [FR]
EMPTY = []
B = 0x7f0000000000


def good():
    return {
        'segments': [{'device': 0, 'address': B, 'total_size': 1024, 'stream': 0, 'frames': ST,
                      'segment_pool_id': (0, 0),
                      'blocks': [{'address': B, 'size': 1024, 'requested_size': 1000,
                                  'state': 'active_allocated', 'frames': ST}]},
                     {'device': 0, 'address': B + 4096, 'total_size': 1024, 'stream': 0, 'frames': EMPTY,
                      'blocks': [{'address': B + 4096, 'size': 1024, 'requested_size': 0,
                                  'state': 'inactive', 'frames': EMPTY}]}],
        'device_traces': [[
            {'action': 'segment_alloc', 'addr': B, 'size': 1024, 'stream': 0, 'frames': ST, 'category': 'x'},
            {'action': 'alloc', 'addr': B, 'size': 1000, 'stream': 0, 'frames': ST, 'category': 'x'},
            {'action': 'alloc', 'addr': B + 4096, 'size': 10, 'stream': 0, 'category': 'unknown'},
            {'action': 'free_requested', 'addr': B + 4096, 'size': 10, 'stream': 0, 'category': 'unknown'},
            {'action': 'free_completed', 'addr': B + 4096, 'size': 10, 'stream': 0, 'category': 'unknown'},
            {'action': 'oom', 'size': 1 << 30, 'stream': 0, 'device_free': 5, 'category': 'x'},
        ]],
        'allocator_settings': {},
        'external_annotations': [],
    }


def problems(snap):
    c = check_snapshot.Checker()
    c.check_object(snap)
    return c.problems


failures = 0


def expect_bad(name, snap, needle):
    global failures
    p = problems(snap)
    if not any(needle in x for x in p):
        failures += 1
        print(f'FAIL {name}: expected a problem containing {needle!r}, got {p}')


p = problems(good())
if p:
    failures += 1
    print('FAIL good snapshot reported:', p)

s = good(); s['device_traces'][0] = [dict(e, category='x') for e in s['device_traces'][0]]
expect_bad('no unknown category', s, 'lack "unknown"')
s = good(); del s['device_traces'][0][4]
expect_bad('lone free_requested', s, 'not followed by its free_completed')
s = good(); s['segments'][0]['blocks'][0]['size'] = 512
expect_bad('tiling', s, 'blocks sum to')
s = good(); s['device_traces'][0][5]['addr'] = 0
expect_bad('oom with addr', s, 'oom entry has addr')
s = good(); s['segments'][0]['device'] = 1
expect_bad('missing device list', s, 'has no device_traces list')
s = good(); s['segments'][0]['frames'] = [dict(FR)]
expect_bad('unshared frame dict', s, 'separate dicts')
s = good(); s['segments'][0]['frames'] = list(ST)
expect_bad('unshared frame list', s, 'must be shared')
s = good(); s['categories'] = []
expect_bad('categories key', s, "'categories' must not be written")
s = good(); s['device_traces'][0].append({'action': 'free_requested', 'addr': B + 4096, 'size': 10, 'stream': 0})
s['device_traces'][0].append({'action': 'free_completed', 'addr': B + 4096, 'size': 10, 'stream': 0})
expect_bad('double free', s, 'not allocated')
s = good(); s['device_traces'][0].append({'action': 'free_requested', 'addr': B, 'size': 1000, 'stream': 0})
s['device_traces'][0].append({'action': 'free_completed', 'addr': B, 'size': 1000, 'stream': 0})
expect_bad('live block freed', s, 'freed by its last trace event')
s = good(); s['device_traces'][0].insert(0, {'action': 'free_completed', 'addr': B + 0x100000, 'size': 10, 'stream': 0})
expect_bad('block outside segments', s, 'outside every segment')
s = good(); s['device_traces'][0].append({'action': 'alloc', 'addr': B + 8192, 'size': 10, 'stream': 0})
expect_bad('alloc not live', s, 'not a live block')
s = good(); s['segments'].insert(1, copy.deepcopy(s['segments'][0])); s['segments'][1]['address'] = B + 512
s['segments'][1]['blocks'][0]['address'] = B + 512
s['segments'][1]['frames'] = s['segments'][0]['frames']
s['segments'][1]['blocks'][0]['frames'] = s['segments'][0]['frames']
expect_bad('overlap', s, 'overlap')

# opcode checks on real bytes
c = check_snapshot.Checker()
c.check_opcodes(pickle.dumps(good(), 4))
if not any('FRAME' in x for x in c.problems):
    failures += 1
    print('FAIL python protocol 4 FRAME not reported', c.problems)
c = check_snapshot.Checker()
c.check_opcodes(pickle.dumps(good(), 5))
if not any('PROTO 4' in x for x in c.problems):
    failures += 1
    print('FAIL protocol 5 not reported', c.problems)
c = check_snapshot.Checker()
c.check_opcodes(b'\x80\x04]h\x05.')
if not any('before that memo index' in x for x in c.problems):
    failures += 1
    print('FAIL BINGET of an unknown index not reported', c.problems)
c = check_snapshot.Checker()
c.check_opcodes(b'\x80\x04\x8a\x09' + b'\x00' * 8 + b'\x01.')
if not any('LONG1 of 9 bytes' in x for x in c.problems):
    failures += 1
    print('FAIL 9-byte LONG1 not reported', c.problems)

print('failures:', failures)
sys.exit(1 if failures else 0)
