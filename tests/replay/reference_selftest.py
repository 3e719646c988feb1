#!/usr/bin/env python3
"""Checks the reference allocator against the worked examples and rules of docs/caching-allocator.md
("PyTorch's policy, and what memtrace adds" and the sections after it), so that a disagreement with
`memtrace replay` points at the right side. Exit 0 when all pass."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_allocator import (CachingAllocator, OutOfMemory, Settings, round_size, KIB, MIB,  # noqa: E402
                                 GIB, UNLIMITED)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def segment_allocs(a):
    return [e["size"] for e in a.trace if e["action"] == "segment_alloc"]


# Rounding (docs/caching-allocator.md, "Request rounding"), with the document's examples.
zero = [0] * 16
check(round_size(1, zero) == 512, "tiny requests round to 512")
check(round_size(513, zero) == 1024, "512-byte multiples")
check(round_size(5_000_000, [4] * 16) == 5_242_880, "d=4 example of Request rounding")
check(round_size(600 * KIB, [8] * 16) == 640 * KIB, "d=8 rounds small sizes through interval 0")
check(round_size(4 * MIB, [4] * 16) == 4 * MIB, "powers of two are kept")
check(round_size(1000, [4] * 16) == 1024, "below 512*d: plain rounding")

# roundup_power2_divisions list form (docs/caching-allocator.md, "Settings: MEMTRACE_ALLOC_CONF";
# the 2026 unit test's expectations).
s = Settings("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]")
want = {64: 8, 128: 8, 256: 16, 512: 1, 1024: 0, 2048: 8, 4096: 2}
for mib, d in want.items():
    check(s.divisions[mib.bit_length() - 1] == d, "divisions for %d MiB" % mib)
check(Settings("").max_split_size == UNLIMITED, "max_split_size unlimited by default")
check(Settings("max_split_size_mb:40").max_split_size == 40 * MIB, "max_split_size_mb")
try:
    Settings("max_split_size_mb:10")
    failures.append("max_split_size_mb below 20 accepted")
except ValueError:
    pass

# Segment sizes and pools (docs/caching-allocator.md, "Pools and segment sizes").
a = CachingAllocator(Settings(""))
a.malloc(100)
a.malloc(11 * MIB + 1)
a.malloc(3 * MIB)
check(segment_allocs(a) == [2 * MIB, 12 * MIB, 20 * MIB], "2 MiB / 20 MiB / 2 MiB-multiple segments")

# Best fit (docs/caching-allocator.md, "Best-fit search"): smallest block that fits, same stream only.
a = CachingAllocator(Settings(""))
p1 = a.malloc(5 * MIB)     # one 20 MiB segment: [5][4][3][8 free]
a.malloc(4 * MIB)
p3 = a.malloc(3 * MIB)
a.free(p1)
a.free(p3)                 # free: 5 MiB, and 3 + 8 = 11 MiB merged
a.malloc(3 * MIB, stream=7)
check(len(segment_allocs(a)) == 2, "blocks never cross streams")
r = a.malloc(3 * MIB)
check(r == p1 and len(segment_allocs(a)) == 2, "best fit takes the smallest free block that fits")

# Large-pool split rule (docs/caching-allocator.md, "Splitting"): remaining must exceed 1 MiB.
a = CachingAllocator(Settings(""))
p = a.malloc(19 * MIB + 512)       # 20 MiB segment, remaining 512 KiB: not split
check(a.allocated[p].size == 20 * MIB, "no split when the large remainder is <= 1 MiB")
a.free(p)
p = a.malloc(18 * MIB)            # remaining 2 MiB: split
check(a.allocated[p].size == 18 * MIB, "split when the large remainder is > 1 MiB")

# max_split_size (docs/caching-allocator.md, "Oversize blocks: max_split_size and
# max_non_split_rounding"): oversize blocks serve only big requests.
a = CachingAllocator(Settings("max_split_size_mb:20"))
p = a.malloc(30 * MIB)
a.free(p)
a.malloc(5 * MIB)
check(segment_allocs(a) == [30 * MIB, 20 * MIB], "small request skips the oversize block")
a.malloc(29 * MIB)
check(len(segment_allocs(a)) == 2, "big request reuses the oversize block")

# Coalescing (docs/caching-allocator.md, "Freeing and coalescing").
a = CachingAllocator(Settings(""))
ps = [a.malloc(100 * KIB) for _ in range(3)]
for p in (ps[0], ps[2], ps[1]):
    a.free(p)
check(len(a.free_blocks[True]) == 1 and a.free_blocks[True][0].size == 2 * MIB, "free neighbours merge")

# Out-of-memory path (docs/caching-allocator.md, "When the device is full: release and retry"):
# release cached whole segments, retry, then oom.
a = CachingAllocator(Settings(""), capacity=40 * MIB)
p = a.malloc(12 * MIB)
a.free(p)
q = a.malloc(30 * MIB)
acts = [e["action"] for e in a.trace]
check("segment_free" in acts and acts.index("segment_free") < len(acts) - 2, "cached segment released on retry")
try:
    a.malloc(30 * MIB)
    failures.append("no OOM beyond capacity")
except OutOfMemory:
    check(a.trace[-1]["action"] == "oom" and "addr" not in a.trace[-1], "oom entry without addr")

# Expandable segments (docs/caching-allocator.md, "Expandable segments"): pages mapped on demand,
# sized by the rounded request.
a = CachingAllocator(Settings("expandable_segments:True"), capacity=8 * GIB)
p = a.malloc(3 * MIB)
maps = [e["size"] for e in a.trace if e["action"] == "segment_map"]
check(maps == [20 * MIB], "first large request maps one 20 MiB page")
q = a.malloc(30 * MIB)
maps = [e["size"] for e in a.trace if e["action"] == "segment_map"]
check(maps == [20 * MIB, 20 * MIB], "growth maps only what is missing")
check(not any(e["action"] == "segment_alloc" for e in a.trace), "no segment_alloc with expandable")
a.free(q)
a.empty_cache()
unmaps = [e["size"] for e in a.trace if e["action"] == "segment_unmap"]
check(unmaps == [20 * MIB], "release unmaps whole free pages only")
a.check()

# empty_cache(): every wholly free segment goes back, split ones stay; the entries carry the call's
# stack, while an out-of-memory release carries the stack of the allocation that made it.
a = CachingAllocator(Settings(""), capacity=64 * MIB)
keep = a.malloc(3 * MIB, frames=["keep"])        # a 20 MiB segment, split
p = a.malloc(24 * MIB, frames=["p"])             # a 24 MiB segment of its own
a.malloc(100, frames=["small"])
a.free(p)
n = len(a.trace)
a.empty_cache(frames=["empty_cache"])
frees = [e for e in a.trace[n:]]
check([(e["action"], e["size"], e["frames"]) for e in frees] == [("segment_free", 24 * MIB, ["empty_cache"])],
      "empty_cache frees the whole free segment only, with the call's stack")
p = a.malloc(30 * MIB, frames=["big1"])
a.free(p)
n = len(a.trace)
a.malloc(40 * MIB, frames=["big2"])              # 20 + 2 + 30 + 40 > 64: the cached 30 MiB goes back first
acts = [(e["action"], e["frames"]) for e in a.trace[n:]]
check(acts == [("segment_free", ["big2"]), ("segment_alloc", ["big2"]), ("alloc", ["big2"])],
      "an out-of-memory release carries the allocation's stack: %s" % acts)
n = len(a.trace)
a.empty_cache(frames=["empty_cache"])
check(len(a.trace) == n, "empty_cache with nothing wholly free writes nothing")
a.check()

if failures:
    for f in failures:
        print("FAIL:", f)
    sys.exit(1)
print("reference allocator: all checks passed")
