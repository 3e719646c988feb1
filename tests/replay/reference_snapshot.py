"""Runs a workload (workloads.py) through the reference allocator and builds the snapshot PyTorch's
_dump_snapshot would write for it (docs/snapshot-format.md, "The snapshot dict"): segments with
blocks tiling them, one device's trace (optionally cut to the last `max_entries` entries, as
PyTorch's ring buffer does), fake Python frames shared between entries, allocator_settings.

Also returns the reference's own figures, which the tests compare `memtrace replay` against."""

import pickle
import random

from reference_allocator import CachingAllocator, OutOfMemory, Settings, GIB

START_US = 1767225600000000


class _Frames:
    """One shared stack (list of shared frame dicts) per call site, innermost frame first."""

    def __init__(self, program):
        self.program = program
        self.main = {"filename": program, "line": 1, "name": "<module>"}
        self.loop = {"filename": program, "line": 12, "name": "main"}
        self.stacks = {}

    def __call__(self, site):
        stack = self.stacks.get(site)
        if stack is None:
            line = 20 + 7 * len(self.stacks)
            inner = {"filename": "/usr/lib/python3/site-packages/torch/nn/functional.py",
                     "line": 1000 + len(self.stacks), "name": site}
            caller = {"filename": self.program, "line": line, "name": "step"}
            stack = [inner, caller, self.loop, self.main]
            self.stacks[site] = stack
        return stack

    def empty_cache(self, site):
        """torch.cuda.empty_cache() called from `site`: its innermost frame is torch's own."""
        stack = self.stacks.get(("empty_cache", site))
        if stack is None:
            caller = {"filename": self.program, "line": 20 + 7 * len(self.stacks), "name": site}
            inner = {"filename": "/usr/lib/python3/site-packages/torch/cuda/memory.py", "line": 224,
                     "name": "empty_cache"}
            stack = [inner, caller, self.loop, self.main]
            self.stacks[("empty_cache", site)] = stack
        return stack


def run(ops, conf="", capacity=80 * GIB, max_entries=None, program="workload.py", seed=0):
    settings = Settings(conf)
    rng = random.Random(seed)
    now = [START_US]

    def clock():
        now[0] += rng.randrange(1, 40)
        return now[0]

    alloc = CachingAllocator(settings, capacity=capacity, clock=clock)
    frames = _Frames(program)
    ptrs = {}
    oom = None
    allocs_done = 0
    empty_cache_calls = 0
    for op in ops:
        if op[0] == "malloc":
            _, i, size, stream, site = op
            try:
                ptrs[i] = alloc.malloc(size, stream, frames(site))
            except OutOfMemory:
                if oom is None:
                    oom = {"alloc_ordinal": allocs_done, "size": size, "stream": stream}
                continue
            allocs_done += 1
        elif op[0] == "empty_cache":
            before = len(alloc.trace)
            alloc.empty_cache(frames.empty_cache(op[1]))
            if len(alloc.trace) > before:   # a call that released nothing leaves no entry
                empty_cache_calls += 1
        else:
            ptr = ptrs.pop(op[1], None)
            if ptr is not None:
                alloc.free(ptr)
        alloc.check()
    trace = alloc.trace
    if max_entries is not None and len(trace) > max_entries:
        trace = trace[len(trace) - max_entries:]
    snapshot = {
        "segments": alloc.snapshot_segments(),
        "device_traces": [trace],
        "allocator_settings": settings.as_snapshot_dict(),
        "external_annotations": [],
    }
    figures = {
        "peak_reserved": alloc.peak_reserved,
        "peak_allocated": alloc.peak_allocated,
        "segment_allocs": [e["size"] for e in alloc.trace if e["action"] == "segment_alloc"],
        "segment_frees": [e["size"] for e in alloc.trace if e["action"] == "segment_free"],
        "segment_maps": [e["size"] for e in alloc.trace if e["action"] == "segment_map"],
        "segment_unmaps": [e["size"] for e in alloc.trace if e["action"] == "segment_unmap"],
        "oom": oom,
        "allocs": allocs_done,
        "empty_cache_calls": empty_cache_calls,
    }
    return snapshot, figures


def write(path, snapshot, protocol=2):
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=protocol)
