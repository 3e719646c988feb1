"""A reimplementation of PyTorch's CUDA caching-allocator policy, written from the policy as PyTorch
documents and implements it (core/caching/README.md states it in the project's words) and independent
of memtrace's C++ allocator, so that the
two can check each other: this one runs a workload (malloc/free operations) and writes the snapshot
PyTorch's _dump_snapshot would have written; `memtrace replay` must make the same segment decisions.

Modelled: request rounding (512 B, roundup_power2_divisions), small/large pools, 2 MiB / 20 MiB /
2 MiB-multiple segments, best fit by (stream, size, address), max_split_size and
max_non_split_rounding, should_split, coalescing on free, the out-of-memory path (release oversize
cached blocks, then every whole cached segment, retry, then an `oom` entry), torch.cuda.empty_cache()
(the same release of every whole cached segment and every whole free expandable page, outside any
allocation), and expandable segments (pages mapped on demand into one reserved range per stream and
pool, unmapped on release).

Trace entries carry the stacks PyTorch gives them: the segment_free / segment_unmap entries of a
release made inside an allocation (out-of-memory path) carry that allocation's stack, as do its
segment_alloc / segment_map and `oom` entries; those of empty_cache() carry the stack of the
empty_cache() call (PyTorch's `context ? context : block->context_when_segment_allocated`, with the
context gathered by the allocation or by emptyCache).
Not modelled: record_stream (every free completes at once), memory fraction and garbage collection,
private pools and CUDA graphs.

The device is an address space with a physical capacity: a segment allocation or a page mapping fails
when it would take more than `capacity` bytes in total.
"""

import bisect
import math

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

MIN_BLOCK = 512
SMALL_SIZE = 1 * MIB          # rounded sizes up to this go to the small pool
SMALL_BUFFER = 2 * MIB        # small-pool segment size and small-pool expandable page
LARGE_BUFFER = 20 * MIB       # large segment for requests below MIN_LARGE_ALLOC; large-pool page
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB
INTERVALS = 16                # roundup_power2_divisions intervals: [1 MiB, 2 MiB), ..., [32 GiB, ...)

UNLIMITED = (1 << 64) - 1     # max_split_size when not set (SIZE_MAX)


class ConfError(ValueError):
    pass


class Settings:
    """What PYTORCH_CUDA_ALLOC_CONF sets, for the keys this model uses (others are kept, unused)."""

    def __init__(self, conf=""):
        self.conf = conf
        self.max_split_size = UNLIMITED
        self.max_non_split_rounding = LARGE_BUFFER
        self.divisions = [0] * INTERVALS
        self.expandable_segments = False
        self.garbage_collection_threshold = 0.0
        self.other = {}
        self._parse(conf)

    def _parse(self, conf):
        # The tokenizer of docs/caching-allocator.md, "Settings: MEMTRACE_ALLOC_CONF": split on
        # , : [ ] and drop whitespace.
        tokens = []
        cur = ""
        for ch in conf:
            if ch in ",:[]":
                if cur:
                    tokens.append(cur)
                cur = ""
                if ch in "[]":
                    tokens.append(ch)
            elif not ch.isspace():
                cur += ch
        if cur:
            tokens.append(cur)
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if i + 1 >= len(tokens):
                raise ConfError("no value for %s" % key)
            if key == "roundup_power2_divisions":
                i = self._parse_divisions(tokens, i + 1)
                continue
            value = tokens[i + 1]
            i += 2
            if key == "max_split_size_mb":
                mb = int(value)
                if mb < LARGE_BUFFER // MIB:
                    raise ConfError("max_split_size_mb must be >= 20")
                self.max_split_size = mb * MIB
            elif key == "max_non_split_rounding_mb":
                mb = int(value)
                if mb < LARGE_BUFFER // MIB:
                    raise ConfError("max_non_split_rounding_mb must be >= 20")
                self.max_non_split_rounding = mb * MIB
            elif key == "expandable_segments":
                self.expandable_segments = _parse_bool(value)
            elif key == "garbage_collection_threshold":
                self.garbage_collection_threshold = float(value)
            else:
                self.other[key] = value

    def _parse_divisions(self, tokens, i):
        if tokens[i] != "[":
            d = _division(tokens[i])
            self.divisions = [d] * INTERVALS
            return i + 1
        i += 1
        first = True
        last_index = None
        pairs = []
        while tokens[i] != "]":
            key, value = tokens[i], _division(tokens[i + 1])
            i += 2
            if key == ">":
                start = 0 if last_index is None else last_index + 1
                for k in range(start, INTERVALS):
                    self.divisions[k] = value
                continue
            mib = int(key)
            if mib <= 0 or mib & (mib - 1):
                raise ConfError("roundup_power2_divisions keys must be powers of two")
            index = min(max(mib.bit_length() - 1, 0), INTERVALS - 1)
            if first:
                for k in range(index):
                    self.divisions[k] = value
                first = False
            self.divisions[index] = value
            last_index = index
            pairs.append((index, value))
        return i + 1

    def as_snapshot_dict(self):
        """allocator_settings as PyTorch writes them (docs/snapshot-format.md, "allocator_settings
        and memtrace's metadata")."""
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.conf,
            "max_split_size": -1 if self.max_split_size == UNLIMITED else self.max_split_size,
            "garbage_collection_threshold": float(self.garbage_collection_threshold),
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "graph_capture_record_stream_reuse": False,
            "roundup_power2_divisions": {str(1 << k): self.divisions[k] for k in range(INTERVALS)},
        }


def _parse_bool(text):
    if text == "True":
        return True
    if text == "False":
        return False
    raise ConfError("booleans are True or False, not %r" % text)


def _division(text):
    d = int(text)
    if d < 0 or (d and d & (d - 1)):
        raise ConfError("divisions must be 0 or a power of two")
    return d


def round_size(size, divisions):
    if size < MIN_BLOCK:
        return MIN_BLOCK
    index = min(max(size.bit_length() - 1 - 20, 0), INTERVALS - 1)
    d = divisions[index]
    if d > 1 and size > MIN_BLOCK * d:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor // d
        if step == 0:
            return 2 * floor
        return -(-size // step) * step
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def segment_size_for(rounded):
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


class Block:
    __slots__ = ("ptr", "size", "stream", "small", "segment", "prev", "next", "allocated", "mapped",
                 "requested", "frames")

    def __init__(self, ptr, size, stream, small, segment, mapped=True):
        self.ptr, self.size, self.stream, self.small, self.segment = ptr, size, stream, small, segment
        self.prev = self.next = None
        self.allocated = False
        self.mapped = mapped
        self.requested = 0
        self.frames = []

    def key(self):
        return (self.stream, self.size, self.ptr)


class Segment:
    """One cudaMalloc, or one expandable reservation (then `expandable` is set)."""
    __slots__ = ("base", "size", "stream", "small", "expandable", "frames", "head")

    def __init__(self, base, size, stream, small, expandable, frames):
        self.base, self.size, self.stream, self.small = base, size, stream, small
        self.expandable, self.frames = expandable, frames
        self.head = None


class SortedBlocks:
    """Blocks ordered by a key function; lower_bound gives the first at or after a key."""

    def __init__(self, key):
        self._key = key
        self._keys = []
        self._blocks = []

    def add(self, b):
        k = self._key(b)
        i = bisect.bisect_left(self._keys, k)
        self._keys.insert(i, k)
        self._blocks.insert(i, b)

    def remove(self, b):
        k = self._key(b)
        i = bisect.bisect_left(self._keys, k)
        assert i < len(self._blocks) and self._blocks[i] is b, "block not in its pool"
        del self._keys[i]
        del self._blocks[i]

    def lower_bound(self, k):
        return bisect.bisect_left(self._keys, k)

    def __getitem__(self, i):
        return self._blocks[i]

    def __len__(self):
        return len(self._blocks)

    def __iter__(self):
        return iter(list(self._blocks))


class Device:
    """The driver as the allocator sees it: address ranges and a physical capacity."""

    BASE = 0x7F0000000000
    ALIGN = 2 * MIB
    RESERVE_BASE = 0x7E0000000000

    def __init__(self, capacity):
        self.capacity = capacity
        self.used = 0                   # physical bytes: live segments plus mapped pages
        self.ranges = []                # sorted (start, end) of live cudaMalloc ranges
        self.next_reserve = self.RESERVE_BASE

    def malloc(self, size):
        if self.used + size > self.capacity:
            return None
        # Lowest free range that fits (freed ranges are reused, as a driver does).
        start = self.BASE
        for lo, hi in self.ranges:
            if lo - start >= size:
                break
            start = max(start, -(-hi // self.ALIGN) * self.ALIGN)
        bisect.insort(self.ranges, (start, start + size))
        self.used += size
        return start

    def free(self, ptr, size):
        self.ranges.remove((ptr, ptr + size))
        self.used -= size

    def reserve(self, size):
        base = self.next_reserve
        self.next_reserve += -(-size // (1 << 30)) * (1 << 30) + (1 << 30)
        return base

    def map(self, size):
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def unmap(self, size):
        self.used -= size


class OutOfMemory(Exception):
    pass


class CachingAllocator:
    def __init__(self, settings, capacity=80 * GIB, record=None, clock=None):
        self.s = settings
        self.dev = Device(capacity)
        self.capacity = capacity
        self.free_blocks = {True: SortedBlocks(Block.key), False: SortedBlocks(Block.key)}
        # Unmapped pieces of expandable reservations, by (stream, address).
        self.unmapped = {True: SortedBlocks(lambda b: (b.stream, b.ptr)),
                         False: SortedBlocks(lambda b: (b.stream, b.ptr))}
        self.segments = []              # live Segment objects
        self.allocated = {}             # ptr -> Block
        self.trace = []
        self._record = record
        self.clock = clock or (lambda: 0)
        self.reserved = 0
        self.allocated_bytes = 0
        self.peak_reserved = 0
        self.peak_allocated = 0
        self.segment_allocs = 0
        self.segment_frees = 0
        self.maps = 0
        self.unmaps = 0

    # ---- trace -------------------------------------------------------------------------------------
    def _event(self, action, addr, size, stream, frames, **extra):
        e = {"action": action}
        if addr is not None:
            e["addr"] = addr
        e["size"] = size
        e["stream"] = stream
        e.update(extra)
        e["time_us"] = self.clock()
        e["compile_context"] = ""
        e["user_metadata"] = ""
        if frames is not None:
            e["frames"] = frames
        self.trace.append(e)

    # ---- malloc ------------------------------------------------------------------------------------
    def malloc(self, size, stream=0, frames=()):
        frames = list(frames) if not isinstance(frames, list) else frames
        rounded = round_size(size, self.s.divisions)
        small = rounded <= SMALL_SIZE
        seg_size = segment_size_for(rounded)
        block = self._find_free(small, stream, rounded)
        if block is None:
            block = (self._new_block(small, stream, rounded, seg_size, frames)
                     or (self._release_oversize(small, stream, rounded, frames)
                         and self._new_block(small, stream, rounded, seg_size, frames))
                     or (self._release_cached(frames)
                         and self._new_block(small, stream, rounded, seg_size, frames)))
        if not block:
            self._event("oom", None, rounded, stream, frames, device_free=self.capacity - self.dev.used)
            raise OutOfMemory(size)
        block = self._split(block, rounded)
        block.allocated = True
        block.requested = size
        block.frames = frames
        self.allocated[block.ptr] = block
        self.allocated_bytes += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated_bytes)
        self._event("alloc", block.ptr, size, stream, frames)
        return block.ptr

    def _find_free(self, small, stream, rounded):
        pool = self.free_blocks[small]
        i = pool.lower_bound((stream, rounded, 0))
        if i >= len(pool) or pool[i].stream != stream:
            return None
        b = pool[i]
        if b.segment.expandable:
            # Rank an expandable block by what it could grow to: itself plus an unmapped neighbour.
            def growable(x):
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)
            while (i + 1 < len(pool) and pool[i].segment.expandable and pool[i + 1].stream == stream
                   and growable(pool[i + 1]) < growable(pool[i])):
                i += 1
            b = pool[i]
        ms = self.s.max_split_size
        if rounded < ms and b.size >= ms:
            return None
        if rounded >= ms and b.size >= rounded + self.s.max_non_split_rounding:
            return None
        pool.remove(b)
        return b

    def _new_block(self, small, stream, rounded, seg_size, frames):
        if self.s.expandable_segments:
            return self._grow_expandable(small, stream, rounded, frames)
        ptr = self.dev.malloc(seg_size)
        if ptr is None:
            return None
        seg = Segment(ptr, seg_size, stream, small, False, frames)
        b = Block(ptr, seg_size, stream, small, seg)
        seg.head = b
        self.segments.append(seg)
        self._reserve_change(seg_size)
        self.segment_allocs += 1
        self._event("segment_alloc", ptr, seg_size, stream, frames)
        return b

    def _reserve_change(self, delta):
        self.reserved += delta
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    # ---- splitting and freeing ---------------------------------------------------------------------
    def _split(self, b, rounded):
        remaining = b.size - rounded
        if b.small or self.s.expandable_segments:
            split = remaining >= MIN_BLOCK
        else:
            split = rounded < self.s.max_split_size and remaining > SMALL_SIZE
        if not split:
            return b
        rest = Block(b.ptr + rounded, remaining, b.stream, b.small, b.segment)
        rest.prev, rest.next = b, b.next
        if b.next is not None:
            b.next.prev = rest
        b.next = rest
        b.size = rounded
        self.free_blocks[b.small].add(rest)
        return b

    def free(self, ptr):
        b = self.allocated.pop(ptr)
        self._event("free_requested", ptr, b.requested, b.stream, b.frames)
        self._event("free_completed", ptr, b.requested, b.stream, b.frames)
        self.allocated_bytes -= b.size
        b.allocated = False
        b.requested = 0
        b.frames = []
        pool = self.free_blocks[b.small]
        for neighbour in (b.prev, b.next):
            if neighbour is not None and not neighbour.allocated and neighbour.mapped:
                pool.remove(neighbour)
                self._merge(b, neighbour)
        pool.add(b)

    def _merge(self, b, n):
        """Absorbs neighbour n (free, same mapped state) into b."""
        if n is b.prev:
            b.ptr = n.ptr
            b.prev = n.prev
            if n.prev is not None:
                n.prev.next = b
            else:
                b.segment.head = b
        else:
            b.next = n.next
            if n.next is not None:
                n.next.prev = b
        b.size += n.size

    # ---- out-of-memory path ------------------------------------------------------------------------
    def _release_oversize(self, small, stream, rounded, frames):
        ms = self.s.max_split_size
        if ms == UNLIMITED:
            return False
        pool = self.free_blocks[small]
        want = max(rounded, ms)
        i = pool.lower_bound((stream, want, 0))
        if i < len(pool) and pool[i].stream == stream and not pool[i].segment.expandable:
            self._release_segment(pool[i], frames)
            return True
        # No single block is big enough: release the largest oversize blocks of this stream.
        released = 0
        i -= 1
        while i >= 0 and released < want:
            b = pool[i]
            if b.stream != stream or b.size < ms:
                break
            if not b.segment.expandable:
                released += b.size
                self._release_segment(b, frames)
            i -= 1
        return released >= want

    def _release_segment(self, b, frames=None):
        assert b.prev is None and b.next is None and not b.segment.expandable
        self.free_blocks[b.small].remove(b)
        seg = b.segment
        self.segments.remove(seg)
        self.dev.free(seg.base, seg.size)
        self._reserve_change(-seg.size)
        self.segment_frees += 1
        self._event("segment_free", seg.base, seg.size, seg.stream, seg.frames if frames is None else frames)

    def _release_cached(self, frames=None):
        """Every whole cached segment, large pool first, and every whole free page of expandable
        reservations; `frames` is the stack of the allocation or empty_cache() call that asked."""
        for small in (False, True):
            expandable = []
            for b in self.free_blocks[small]:
                if b.segment.expandable:
                    expandable.append(b)
                elif b.prev is None and b.next is None:
                    self._release_segment(b, frames)
            for b in expandable:
                self._unmap(b, frames)
                if b.prev is None and b.next is None:
                    self.unmapped[small].remove(b)
                    self.segments.remove(b.segment)
        return True

    def empty_cache(self, frames=None):
        """torch.cuda.empty_cache(): the release of the out-of-memory path, asked for by the program
        (one segment_free or segment_unmap entry per release, with the call's stack; none when nothing
        is wholly free)."""
        self._release_cached(list(frames) if frames is not None else None)

    # ---- expandable segments -----------------------------------------------------------------------
    def _page(self, small):
        return SMALL_BUFFER if small else LARGE_BUFFER

    def _grow_expandable(self, small, stream, rounded, frames):
        c = self._find_expandable(small, stream, rounded)
        if not c.mapped:
            c = self._map(c, min(c.size, rounded), frames)
            if c is None:
                return None
        while c.size < rounded:
            c = self._map(c.next, min(rounded - c.size, c.next.size), frames)
            if c is None:
                return None
        self.free_blocks[small].remove(c)
        return c

    def _find_expandable(self, small, stream, rounded):
        def usable(b):
            return b is not None and not b.allocated

        unmapped = self.unmapped[small]
        i = unmapped.lower_bound((stream, 0))
        while i < len(unmapped) and unmapped[i].stream == stream:
            c = unmapped[i]
            if usable(c.prev):
                c = c.prev
            room, x = 0, c
            while room < rounded and usable(x):
                room += x.size
                x = x.next
            if room >= rounded:
                return c
            i += 1
        # A new reservation of about 1.125 times the device for this stream and pool.
        page = self._page(small)
        size = -(-(self.capacity + self.capacity // 8) // page) * page
        seg = Segment(self.dev.reserve(size), size, stream, small, True, [])
        b = Block(seg.base, size, stream, small, seg, mapped=False)
        seg.head = b
        self.segments.append(seg)
        unmapped.add(b)
        return b

    def _map(self, b, want, frames=()):
        """Maps whole pages at the start of unmapped block b to cover `want` bytes; returns the
        mapped block after merging it with free mapped neighbours, or None when the device is full."""
        page = self._page(b.small)
        size = min(-(-want // page) * page, b.size)
        if not self.dev.map(size):
            return None
        self.unmapped[b.small].remove(b)
        if size < b.size:
            rest = Block(b.ptr + size, b.size - size, b.stream, b.small, b.segment, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = size
            self.unmapped[b.small].add(rest)
        b.mapped = True
        start = b.ptr
        pool = self.free_blocks[b.small]
        for n in (b.prev, b.next):
            if n is not None and not n.allocated and n.mapped:
                pool.remove(n)
                self._merge(b, n)
        pool.add(b)
        self._reserve_change(size)
        self.maps += 1
        self._event("segment_map", start, size, b.stream, list(frames))
        return b

    def _unmap(self, b, frames=None):
        # Whole pages only, counted from the reservation's base.
        page = self._page(b.small)
        base = b.segment.base
        lo = base + -(-(b.ptr - base) // page) * page
        hi = base + (b.ptr + b.size - base) // page * page
        if hi <= lo:
            return
        pool = self.free_blocks[b.small]
        pool.remove(b)
        if lo > b.ptr:
            before = Block(b.ptr, lo - b.ptr, b.stream, b.small, b.segment)
            before.prev, before.next = b.prev, b
            if b.prev is not None:
                b.prev.next = before
            else:
                b.segment.head = before
            b.prev = before
            pool.add(before)
        if hi < b.ptr + b.size:
            after = Block(hi, b.ptr + b.size - hi, b.stream, b.small, b.segment)
            after.prev, after.next = b, b.next
            if b.next is not None:
                b.next.prev = after
            b.next = after
            pool.add(after)
        b.ptr, b.size, b.mapped = lo, hi - lo, False
        for n in (b.prev, b.next):
            if n is not None and not n.mapped:
                self.unmapped[b.small].remove(n)
                self._merge(b, n)
        self.unmapped[b.small].add(b)
        self.dev.unmap(hi - lo)
        self._reserve_change(-(hi - lo))
        self.unmaps += 1
        self._event("segment_unmap", lo, hi - lo, b.stream, [] if frames is None else frames)

    # ---- state -------------------------------------------------------------------------------------
    def largest_free(self):
        best = 0
        for small in (True, False):
            for b in self.free_blocks[small]:
                best = max(best, b.size)
        return best

    def snapshot_segments(self, device=0):
        """The `segments` list: one dict per cudaMalloc, or per contiguous mapped range of an
        expandable reservation, blocks tiling it in address order; sorted by address."""
        out = []
        for seg in self.segments:
            runs, run = [], []
            b = seg.head
            while b is not None:
                if b.mapped:
                    run.append(b)
                elif run:
                    runs.append(run)
                    run = []
                b = b.next
            if run:
                runs.append(run)
            for run in runs:
                blocks = []
                for x in run:
                    blocks.append({
                        "address": x.ptr,
                        "size": x.size,
                        "requested_size": x.requested if x.allocated else 0,
                        "state": "active_allocated" if x.allocated else "inactive",
                        "frames": x.frames if x.allocated else [],
                    })
                allocated = [x for x in run if x.allocated]
                out.append({
                    "device": device,
                    "address": run[0].ptr,
                    "total_size": sum(x.size for x in run),
                    "allocated_size": sum(x.size for x in allocated),
                    "active_size": sum(x.size for x in allocated),
                    "requested_size": sum(x.requested for x in allocated),
                    "stream": seg.stream,
                    "segment_type": "small" if seg.small else "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": seg.expandable,
                    "frames": seg.frames,
                    "blocks": blocks,
                })
        out.sort(key=lambda s: s["address"])
        return out

    def check(self):
        """Internal consistency: every segment tiled by linked blocks, free blocks in their pool."""
        for seg in self.segments:
            b, end = seg.head, seg.base
            assert b.prev is None
            while b is not None:
                assert b.ptr == end, "gap in segment"
                end += b.size
                if not b.allocated:
                    pool = self.free_blocks[b.small] if b.mapped else self.unmapped[b.small]
                    k = pool._key(b)
                    i = pool.lower_bound(k)
                    assert pool[i] is b, "free block missing from its pool"
                if b.next is not None:
                    assert b.next.prev is b
                b = b.next
            assert end == seg.base + seg.size, "segment not tiled"
