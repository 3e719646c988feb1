#!/usr/bin/env python3
"""Check that a memtrace snapshot is something PyTorch's memory viewer and _memory_viz.py accept.

Usage:
    python3 check_snapshot.py FILE [FILE...] [--expect-json SPEC] [--quiet]

Exit status 0 when every check passes (one "OK ..." line per file unless --quiet), 1 when a file
is inconsistent (one line per problem, prefixed by the file name when several are checked), 2 for
usage errors or an unreadable file. From Python: check_snapshot.check_file(path, expect=None)
returns the list of problems (empty when consistent).

What is checked (docs/snapshot-format.md, "The pickle subset memtrace writes", "Pickle pitfalls a
writer avoids" and "Consistency rules for a writer"):
  * opcodes (pickletools.genops): PROTO 4 first, no FRAME, only the set of "The pickle subset
    memtrace writes", STOP last with nothing after it; MARK batches of at most 1000 items / 1000 pairs; LONG1 at most 8 bytes; every
    BINGET/LONG_BINGET refers to an index already stored by MEMOIZE; integers within +-2^53;
  * top level: a dict with segments and device_traces; no 'categories' or 'version' key; known
    keys only (segments, device_traces, allocator_settings, external_annotations, host_segments,
    host_traces);
  * segments: required keys and types; blocks tile the segment exactly; states are known; every
    segment's device has a device_traces list; segments of a device do not overlap; sorted by
    (device, address);
  * frames: frame dicts have str filename, int line, str name; identical frame lists and identical
    frame dicts are the SAME object (shared through the memo);
  * device_traces: a list of lists (at least one); entries have action/size/stream (addr on all but
    oom; oom has device_free and no addr); a free_requested is immediately followed by its
    free_completed; per address, allocs and frees alternate (a free with no alloc is accepted only as
    the first event of its address: its alloc predates the kept history), same for segments;
  * state after the trace: every allocation left open by the trace is a live block of that device,
    and no live block was freed by its last event (same for segments);
  * the "Allocator State History" replay: undoing events from the newest back never needs a block
    outside every segment, never removes a segment that still holds a block, and never un-requests
    a block that does not exist (the viewer would throw);
  * categories: if any device trace entry has a category, some entry has category 'unknown'
    (every viewer version read throws otherwise: docs/snapshot-format.md, "The viewer's 'unknown'
    category");
  * host_segments / host_traces, when present: segment-shaped dicts with device -1 and a flat list
    of entry dicts.

--expect-json SPEC adds expectations; SPEC is a JSON object, inline (starting with '{') or the path
of a file. Keys (all optional):
    "segments": N                 number of device segments
    "segment_bytes": {"0": B}     sum of total_size per device
    "device_lists": N             number of device_traces lists (at least)
    "entries": N                  total entries over all device lists
    "actions": {"alloc": N, ...}  exact count per action over all device lists
    "host_segments": N            number of host segments (0 when the key is absent)
    "host_entries": N             entries in host_traces (0 when absent)
    "categories": ["torch", ...]  categories that must appear in device traces
    "frame_names": ["main", ...]  substrings that must appear in some frame's name
    "no_frame_names": ["memtrace::", ...]  substrings that must not appear in any frame's name
    "no_frame_files": ["libmemtrace", ...] substrings that must not appear in any frame's filename
    "metadata": {"pid": 123, ...}  items of allocator_settings['memtrace']
"""
import bisect
import io
import json
import os
import pickle
import pickletools
import sys

ALLOWED_OPS = {
    'PROTO', 'EMPTY_DICT', 'EMPTY_LIST', 'MARK', 'SETITEMS', 'APPENDS', 'SHORT_BINUNICODE',
    'BINUNICODE', 'BININT1', 'BININT2', 'BININT', 'LONG1', 'BINFLOAT', 'NEWTRUE', 'NEWFALSE',
    'NONE', 'TUPLE2', 'MEMOIZE', 'BINGET', 'LONG_BINGET', 'STOP',
}
PUSH_OPS = {
    'EMPTY_DICT', 'EMPTY_LIST', 'SHORT_BINUNICODE', 'BINUNICODE', 'BININT1', 'BININT2', 'BININT',
    'LONG1', 'BINFLOAT', 'NEWTRUE', 'NEWFALSE', 'NONE', 'BINGET', 'LONG_BINGET',
}
TOP_KEYS = {'segments', 'device_traces', 'allocator_settings', 'external_annotations',
            'host_segments', 'host_traces'}
ACTIONS = {'alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free',
           'segment_map', 'segment_unmap', 'oom', 'snapshot', 'annotate'}
STATES = {'active_allocated', 'active_pending_free', 'inactive'}
SAFE_INT = 2 ** 53
MAX_PROBLEMS = 50


class Checker:
    def __init__(self):
        self.problems = []

    def bad(self, msg):
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(msg)
        elif len(self.problems) == MAX_PROBLEMS:
            self.problems.append('... (more problems not shown)')

    # ---------------------------------------------------------------- opcodes
    def check_opcodes(self, data):
        depth = 0
        marks = []
        memo = 0
        first = True
        stop_at = None
        try:
            for op, arg, pos in pickletools.genops(io.BytesIO(data)):
                name = op.name
                if first:
                    first = False
                    if name != 'PROTO' or arg != 4:
                        self.bad(f'opcodes: stream must start with PROTO 4, got {name} {arg}')
                if name not in ALLOWED_OPS:
                    self.bad(f'opcodes: {name} at byte {pos} is outside the viewer-safe set')
                if name in PUSH_OPS:
                    depth += 1
                if name == 'MARK':
                    marks.append(depth)
                elif name in ('APPENDS', 'SETITEMS'):
                    if not marks:
                        self.bad(f'opcodes: {name} without MARK at byte {pos}')
                        continue
                    m = marks.pop()
                    n = depth - m
                    if name == 'APPENDS' and n > 1000:
                        self.bad(f'opcodes: APPENDS of {n} items at byte {pos} (max 1000)')
                    if name == 'SETITEMS':
                        if n % 2:
                            self.bad(f'opcodes: SETITEMS with an odd item count at byte {pos}')
                        if n // 2 > 1000:
                            self.bad(f'opcodes: SETITEMS of {n // 2} pairs at byte {pos} (max 1000)')
                    depth = m
                elif name == 'TUPLE2':
                    depth -= 1
                elif name == 'MEMOIZE':
                    memo += 1
                elif name in ('BINGET', 'LONG_BINGET'):
                    if arg >= memo:
                        self.bad(f'opcodes: {name} {arg} at byte {pos} before that memo index was stored')
                elif name == 'LONG1':
                    if abs(arg) >= SAFE_INT:
                        self.bad(f'opcodes: integer {arg} at byte {pos} is beyond 2^53')
                    nbytes = data[pos + 1]
                    if nbytes > 8:
                        self.bad(f'opcodes: LONG1 of {nbytes} bytes at byte {pos}')
                elif name == 'STOP':
                    stop_at = pos
        except Exception as e:  # malformed stream
            self.bad(f'opcodes: cannot walk the stream: {e}')
            return
        if stop_at is None:
            self.bad('opcodes: no STOP')
        elif stop_at != len(data) - 1:
            self.bad(f'opcodes: {len(data) - 1 - stop_at} bytes after STOP')
        if marks:
            self.bad('opcodes: MARK never closed')

    # ---------------------------------------------------------------- frames
    def check_frames(self, frames, where, share):
        if not isinstance(frames, list):
            self.bad(f'{where}: frames is not a list')
            return
        key = []
        for f in frames:
            if not isinstance(f, dict):
                self.bad(f'{where}: a frame is not a dict')
                return
            fn, line, name = f.get('filename'), f.get('line'), f.get('name')
            if not isinstance(fn, str) or not isinstance(name, str) or not isinstance(line, int) \
                    or isinstance(line, bool):
                self.bad(f'{where}: frame {f!r} lacks str filename / int line / str name')
                return
            fk = (fn, line, name)
            key.append(fk)
            share['frame_ids'].setdefault(fk, set()).add(id(f))
            share['names'].append(name)
            share['files'].add(fn)
        share['list_ids'].setdefault(tuple(key), set()).add(id(frames))
        share['keep'].append(frames)  # keep objects alive so that ids stay unique

    # ---------------------------------------------------------------- segments
    def check_segments(self, segs, what, share, host):
        if not isinstance(segs, list):
            self.bad(f'{what} is not a list')
            return []
        out = []
        prev = None
        for i, s in enumerate(segs):
            w = f'{what}[{i}]'
            if not isinstance(s, dict):
                self.bad(f'{w}: not a dict')
                continue
            ok = True
            for k, t in (('device', int), ('address', int), ('total_size', int), ('stream', int),
                         ('blocks', list)):
                if not isinstance(s.get(k), t) or isinstance(s.get(k), bool):
                    self.bad(f'{w}: {k} missing or not {t.__name__}')
                    ok = False
            if not ok:
                continue
            if host and s['device'] != -1:
                self.bad(f'{w}: host segment with device {s["device"]} (expected -1)')
            if not host and s['device'] < 0:
                self.bad(f'{w}: device segment with device {s["device"]}')
            if 'frames' in s:
                self.check_frames(s['frames'], w, share)
            if 'segment_pool_id' in s and not (isinstance(s['segment_pool_id'], tuple)
                                               and len(s['segment_pool_id']) == 2):
                self.bad(f'{w}: segment_pool_id is not a 2-tuple')
            total = 0
            for j, b in enumerate(s['blocks']):
                bw = f'{w}.blocks[{j}]'
                if not isinstance(b, dict) or not isinstance(b.get('size'), int):
                    self.bad(f'{bw}: not a dict with an int size')
                    continue
                if b.get('state') not in STATES:
                    self.bad(f'{bw}: state {b.get("state")!r} unknown')
                if 'frames' not in b or not isinstance(b.get('requested_size'), int):
                    self.bad(f'{bw}: frames and requested_size are required')
                else:
                    self.check_frames(b['frames'], bw, share)
                    if b['requested_size'] > b['size'] or b['requested_size'] < 0:
                        self.bad(f'{bw}: requested_size {b["requested_size"]} outside 0..size {b["size"]}')
                if 'address' in b and b['address'] != s['address'] + total:
                    self.bad(f'{bw}: address {b["address"]:#x} does not follow the previous block')
                total += b['size']
            if total != s['total_size']:
                self.bad(f'{w}: blocks sum to {total}, total_size is {s["total_size"]}')
            if not s['blocks'] and s['total_size'] != 0:
                self.bad(f'{w}: no blocks but total_size {s["total_size"]}')
            k = (s['device'], s['address'])
            if prev is not None and k < prev:
                self.bad(f'{w}: not sorted by (device, address)')
            prev = k
            out.append(s)
        # overlaps per device
        by_dev = {}
        for s in out:
            by_dev.setdefault(s['device'], []).append((s['address'], s['total_size']))
        for d, lst in by_dev.items():
            lst.sort()
            for (a0, s0), (a1, _) in zip(lst, lst[1:]):
                if a0 + s0 > a1:
                    self.bad(f'{what}: segments {a0:#x}+{s0} and {a1:#x} overlap on device {d}')
        return out

    # ---------------------------------------------------------------- traces
    def check_entry(self, e, w, share):
        if not isinstance(e, dict):
            self.bad(f'{w}: not a dict')
            return False
        a = e.get('action')
        if a not in ACTIONS:
            self.bad(f'{w}: action {a!r} unknown')
            return False
        for k in ('size', 'stream'):
            if not isinstance(e.get(k), int):
                self.bad(f'{w}: {k} missing or not int')
                return False
        if a == 'oom':
            if 'addr' in e:
                self.bad(f'{w}: oom entry has addr')
            if not isinstance(e.get('device_free'), int):
                self.bad(f'{w}: oom entry lacks device_free')
        elif not isinstance(e.get('addr'), int):
            self.bad(f'{w}: addr missing or not int')
            return False
        for k in ('version', 'idx'):
            if k in e:
                self.bad(f'{w}: {k} is computed by the viewer and must not be written')
        if 'time_us' in e and not isinstance(e['time_us'], int):
            self.bad(f'{w}: time_us is not int')
        if 'category' in e and not isinstance(e['category'], str):
            self.bad(f'{w}: category is not a str')
        if 'frames' in e:
            self.check_frames(e['frames'], w, share)
        return True

    def check_trace_semantics(self, d, trace, segs):
        """Pairing rules, and the state the trace leaves against the segments of device d."""
        blocks_open = {}  # addr -> True while allocated by the trace
        blocks_seen = set()
        seg_open = {}
        seg_seen = set()
        last_block = {}
        last_seg = {}
        for i, e in enumerate(trace):
            a = e['action']
            w = f'device_traces[{d}][{i}]'
            if a == 'free_requested':
                n = trace[i + 1] if i + 1 < len(trace) else None
                if not n or n['action'] != 'free_completed' or n.get('addr') != e['addr']:
                    self.bad(f'{w}: free_requested of {e["addr"]:#x} not followed by its free_completed')
            if a == 'alloc':
                if blocks_open.get(e['addr']):
                    self.bad(f'{w}: alloc at {e["addr"]:#x} which is already allocated')
                blocks_open[e['addr']] = True
                blocks_seen.add(e['addr'])
                last_block[e['addr']] = 'alloc'
            elif a == 'free_completed':
                if not blocks_open.get(e['addr']) and e['addr'] in blocks_seen:
                    # acceptable only when the preceding free_requested of the same pair started it
                    self.bad(f'{w}: free of {e["addr"]:#x} which is not allocated (double free?)')
                blocks_open[e['addr']] = False
                blocks_seen.add(e['addr'])
                last_block[e['addr']] = 'free'
            elif a == 'free_requested':
                if not blocks_open.get(e['addr']) and e['addr'] in blocks_seen:
                    self.bad(f'{w}: free_requested of {e["addr"]:#x} which is not allocated')
            elif a in ('segment_alloc', 'segment_map'):
                if seg_open.get(e['addr']):
                    self.bad(f'{w}: {a} at {e["addr"]:#x} which is already a segment')
                seg_open[e['addr']] = True
                seg_seen.add(e['addr'])
                last_seg[e['addr']] = 'alloc'
            elif a in ('segment_free', 'segment_unmap'):
                if not seg_open.get(e['addr']) and e['addr'] in seg_seen:
                    self.bad(f'{w}: {a} of {e["addr"]:#x} which is not a segment')
                seg_open[e['addr']] = False
                seg_seen.add(e['addr'])
                last_seg[e['addr']] = 'free'
        live_blocks = set()
        live_segs = set()
        for s in segs:
            live_segs.add(s['address'])
            addr = s['address']
            for b in s['blocks']:
                if b.get('state') in ('active_allocated', 'active_pending_free'):
                    live_blocks.add(addr)
                addr += b['size']
        for addr, is_open in blocks_open.items():
            if is_open and addr not in live_blocks:
                self.bad(f'device {d}: alloc of {addr:#x} never freed in the trace but not a live block')
        for addr in live_blocks:
            if last_block.get(addr) == 'free':
                self.bad(f'device {d}: live block {addr:#x} was freed by its last trace event')
        for addr, is_open in seg_open.items():
            if is_open and addr not in live_segs:
                self.bad(f'device {d}: segment {addr:#x} allocated in the trace but not in segments')
        for addr in live_segs:
            if last_seg.get(addr) == 'free':
                self.bad(f'device {d}: segment {addr:#x} is live but its last trace event frees it')

    def replay_segment_view(self, d, trace, segs):
        """MemoryView.simulate_memory: undo events newest first, as the viewer does for idx = -1."""
        # the viewer's annotation pass collapses free_requested + free_completed into 'free'
        events = []
        for e in trace:
            a = e['action']
            if a == 'free_completed' and events and events[-1][0] == 'free_requested' \
                    and events[-1][1] == e['addr']:
                events[-1] = ('free', e['addr'], events[-1][2])
                continue
            events.append((a, e.get('addr'), e['size']))
        seg_addrs = []  # sorted
        seg_size = {}
        blk_addrs = []
        blk = {}
        for s in segs:
            bisect.insort(seg_addrs, s['address'])
            seg_size[s['address']] = s['total_size']
            addr = s['address']
            for b in s['blocks']:
                if b.get('state') in ('active_allocated', 'active_pending_free'):
                    if addr not in blk:
                        bisect.insort(blk_addrs, addr)
                    blk[addr] = b['size']
                addr += b['size']

        def in_segment(addr):
            i = bisect.bisect_right(seg_addrs, addr) - 1
            return i >= 0 and addr < seg_addrs[i] + seg_size[seg_addrs[i]]

        for i in range(len(events) - 1, -1, -1):
            a, addr, size = events[i]
            w = f'device_traces[{d}] event {i} ({a} {addr if addr is None else hex(addr)})'
            if a in ('free', 'free_completed'):
                if addr not in blk:
                    bisect.insort(blk_addrs, addr)
                blk[addr] = size
                if not in_segment(addr):
                    self.bad(f'{w}: undoing it puts a block outside every segment (viewer throws)')
            elif a == 'free_requested':
                if addr not in blk:
                    self.bad(f'{w}: undoing it needs a block that does not exist (viewer throws)')
            elif a == 'alloc':
                if addr in blk:
                    del blk[addr]
                    blk_addrs.remove(addr)
            elif a in ('segment_free', 'segment_unmap'):
                if addr not in seg_size:
                    bisect.insort(seg_addrs, addr)
                seg_size[addr] = size
            elif a in ('segment_alloc', 'segment_map'):
                if addr not in seg_size:
                    self.bad(f'{w}: undoing it removes a segment that does not exist (viewer removes the '
                             f'wrong one)')
                    continue
                end = addr + seg_size[addr]
                j = bisect.bisect_left(blk_addrs, addr)
                if j < len(blk_addrs) and blk_addrs[j] < end:
                    self.bad(f'{w}: undoing it removes a segment that still holds block '
                             f'{blk_addrs[j]:#x} (viewer throws)')
                del seg_size[addr]
                seg_addrs.remove(addr)

    # ---------------------------------------------------------------- all
    def check(self, data, expect):
        self.check_opcodes(data)
        try:
            snap = pickle.loads(data)
        except Exception as e:
            self.bad(f'pickle.loads failed: {e}')
            return None
        return self.check_object(snap, expect)

    def check_object(self, snap, expect=None):
        """Every check except the opcode walk, on an already loaded snapshot."""
        if not isinstance(snap, dict):
            self.bad('top level is not a dict')
            return None
        # `memtrace merge` passes PyTorch's top-level keys it does not know through unchanged.
        st = snap.get('allocator_settings')
        merged = isinstance(st, dict) and isinstance(st.get('memtrace'), dict) and \
            'merged_pytorch_snapshot' in st['memtrace']
        for k in snap:
            if k in ('categories', 'version'):
                self.bad(f'top level: {k!r} must not be written (the viewer computes it)')
            elif k not in TOP_KEYS and not merged:
                self.bad(f'top level: unknown key {k!r}')
        for k in ('segments', 'device_traces'):
            if k not in snap:
                self.bad(f'top level: {k!r} is missing')
                return None
        share = {'frame_ids': {}, 'list_ids': {}, 'names': [], 'files': set(), 'keep': []}
        segs = self.check_segments(snap['segments'], 'segments', share, host=False)
        traces = snap['device_traces']
        if not isinstance(traces, list) or not traces or not all(isinstance(t, list) for t in traces):
            self.bad('device_traces must be a non-empty list of lists')
            return None
        for s in segs:
            if s['device'] >= len(traces):
                self.bad(f'segment {s["address"]:#x} on device {s["device"]} has no device_traces list')
        categories = []
        counts = {}
        n_entries = 0
        for d, t in enumerate(traces):
            good = []
            for i, e in enumerate(t):
                if self.check_entry(e, f'device_traces[{d}][{i}]', share):
                    good.append(e)
                    counts[e['action']] = counts.get(e['action'], 0) + 1
                    if 'category' in e and e['category'] not in categories:
                        categories.append(e['category'])
            n_entries += len(t)
            dsegs = [s for s in segs if s['device'] == d]
            if len(good) == len(t):
                self.check_trace_semantics(d, good, dsegs)
                self.replay_segment_view(d, good, dsegs)
        if categories and 'unknown' not in categories:
            self.bad(f'categories {categories} lack "unknown": viewers before 2025 fail to load')

        n_host_segs = n_host_entries = 0
        if 'host_segments' in snap:
            n_host_segs = len(self.check_segments(snap['host_segments'], 'host_segments', share, host=True))
        if 'host_traces' in snap:
            ht = snap['host_traces']
            if not isinstance(ht, list):
                self.bad('host_traces is not a list')
            else:
                for i, e in enumerate(ht):
                    if isinstance(e, list):
                        self.bad('host_traces must be a flat list of entries')
                        break
                    self.check_entry(e, f'host_traces[{i}]', share)
                n_host_entries = len(ht)
        if ('host_segments' in snap) != ('host_traces' in snap):
            self.bad('host_segments and host_traces must come together')

        settings = snap.get('allocator_settings', {})
        if not isinstance(settings, dict):
            self.bad('allocator_settings is not a dict')
            settings = {}
        if not isinstance(snap.get('external_annotations', []), list):
            self.bad('external_annotations is not a list')
        # PyTorch's trace_alloc_max_entries bounds each device's list; memtrace writes it as its
        # ring's capacity, and no list (completed free halves and the marker included) may exceed it.
        cap = settings.get('trace_alloc_max_entries')
        if isinstance(cap, int) and cap > 0:
            for d, t in enumerate(traces):
                if len(t) > cap:
                    self.bad(f'device_traces[{d}] has {len(t)} entries, over trace_alloc_max_entries {cap}')
            if len(snap.get('host_traces', [])) > cap:
                self.bad(f'host_traces has {len(snap["host_traces"])} entries, over trace_alloc_max_entries {cap}')

        # sharing
        for fk, ids in share['frame_ids'].items():
            if len(ids) > 1:
                self.bad(f'frame {fk} is written as {len(ids)} separate dicts (must be shared)')
                break
        for lk, ids in share['list_ids'].items():
            if len(ids) > 1:
                self.bad(f'a frames list of {len(lk)} frames is written {len(ids)} times (must be shared)')
                break

        if expect:
            self.check_expect(expect, snap, segs, counts, n_entries, categories, share,
                              n_host_segs, n_host_entries, settings, len(traces))
        return dict(segments=len(segs), lists=len(traces), entries=n_entries,
                    host_segments=n_host_segs, host_entries=n_host_entries,
                    categories=categories, frame_lists=len(share['list_ids']))

    def check_expect(self, x, snap, segs, counts, n_entries, categories, share, n_host_segs,
                     n_host_entries, settings, n_lists):
        def eq(name, got, want):
            if got != want:
                self.bad(f'expected {name} {want!r}, got {got!r}')
        if 'segments' in x:
            eq('segments', len(segs), x['segments'])
        if 'segment_bytes' in x:
            got = {}
            for s in segs:
                got[str(s['device'])] = got.get(str(s['device']), 0) + s['total_size']
            for d, b in x['segment_bytes'].items():
                eq(f'segment bytes on device {d}', got.get(str(d), 0), b)
        if 'device_lists' in x and n_lists < x['device_lists']:
            self.bad(f'expected at least {x["device_lists"]} device_traces lists, got {n_lists}')
        if 'entries' in x:
            eq('device trace entries', n_entries, x['entries'])
        for a, n in x.get('actions', {}).items():
            eq(f'{a} entries', counts.get(a, 0), n)
        if 'host_segments' in x:
            eq('host segments', n_host_segs, x['host_segments'])
        if 'host_entries' in x:
            eq('host entries', n_host_entries, x['host_entries'])
        for c in x.get('categories', []):
            if c not in categories:
                self.bad(f'expected category {c!r} among {categories}')
        for n in x.get('frame_names', []):
            if not any(n in name for name in share['names']):
                self.bad(f'expected a frame named like {n!r}')
        for n in x.get('no_frame_names', []):
            hits = [name for name in share['names'] if n in name]
            if hits:
                self.bad(f'frame {hits[0]!r} must not appear')
        for n in x.get('no_frame_files', []):
            hits = [f for f in share['files'] if n in f]
            if hits:
                self.bad(f'frame file {hits[0]!r} must not appear')
        meta = settings.get('memtrace', {}) if isinstance(settings, dict) else {}
        for k, v in x.get('metadata', {}).items():
            eq(f'metadata {k}', meta.get(k), v)


def check_file(path, expect=None):
    """Problems found in one snapshot file (empty list: consistent)."""
    with open(path, 'rb') as f:
        data = f.read()
    c = Checker()
    c.check(data, expect)
    return c.problems


def main(argv):
    args = list(argv[1:])
    quiet = False
    expect = None
    paths = []
    while args:
        a = args.pop(0)
        if a in ('-h', '--help'):
            print(__doc__)
            return 0
        if a in ('-q', '--quiet'):
            quiet = True
        elif a == '--expect-json':
            if not args:
                print('--expect-json needs a value', file=sys.stderr)
                return 2
            spec = args.pop(0)
            try:
                if spec.lstrip().startswith('{'):
                    expect = json.loads(spec)
                else:
                    with open(spec) as f:
                        expect = json.load(f)
            except Exception as e:
                print(f'cannot read --expect-json {spec!r}: {e}', file=sys.stderr)
                return 2
        elif a.startswith('-') and a != '-':
            print(f'unknown option {a!r}', file=sys.stderr)
            return 2
        else:
            paths.append(a)
    if not paths:
        print('usage: check_snapshot.py FILE [FILE...] [--expect-json SPEC] [--quiet]', file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        try:
            with open(path, 'rb') as f:
                data = f.read()
        except OSError as e:
            print(f'cannot read {path}: {e}', file=sys.stderr)
            return 2
        c = Checker()
        info = c.check(data, expect)
        if c.problems:
            prefix = f'{path}: ' if len(paths) > 1 else ''
            for p in c.problems:
                print(prefix + p)
            status = 1
            continue
        if not quiet:
            print(f'OK {os.path.basename(path)}: {info["segments"]} segments, {info["lists"]} device lists, '
                  f'{info["entries"]} entries, {info["host_segments"]} host segments, '
                  f'{info["host_entries"]} host entries, categories {info["categories"]}, '
                  f'{info["frame_lists"]} distinct frame lists')
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv))
