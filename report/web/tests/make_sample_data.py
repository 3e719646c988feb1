#!/usr/bin/env python3
"""Writes a synthetic `window.MEMTRACE_REPORT` object (docs/report.md, "The page's data") as JSON.

    make_sample_data.py small|entries|big OUT.json

The page's browser test draws these before `memtrace report` exists, and keeps drawing them after:
`small` has every section filled (two devices plus pinned host memory, OOMs, leaks, a merged file's
parts); `entries` is a PyTorch file with no times and the empty states (no leak, no OOM, no
segments); `big` is the size the page must stay responsive at (300,000 points in the finest series
level, 50,000 nodes in the full stack tree, 400 segments). The figures agree with each other the
way the contract says they do (a moment's live bytes add up to its allocated bytes, the owners
stack to the allocated series, a layout's blocks to its allocated bytes), so the test can check
that the page draws the data's totals. Deterministic: a fixed seed.
"""
import json
import random
import sys

MiB = 1 << 20
GiB = 1 << 30

USER_FRAMES = ["load_weights (model.c:12)", "ncclCommInitRank", "at::native::add_out",
               "at::native::empty_cuda", "cublasLtMatmul", "attention_kernel_launch (attn.cu:88)",
               "Trainer::step (trainer.cpp:301)", "build_kv_cache (cache.cpp:57)"]
PY_FRAMES = ["forward (model.py:{})", "train_step (train.py:{})", "backward (loss.py:{})",
             "collate (data.py:{})", "optimizer_step (optim.py:{})", "attention (layers.py:{})"]
LIB_FRAMES = ["forward (torch/nn/modules/linear.py:125)", "_call_impl (torch/nn/modules/module.py:1747)",
              "c10::cuda::CUDACachingAllocator::malloc", "at::_ops::add_Tensor::call",
              "_PyEval_EvalFrameDefault", "PyObject_Vectorcall", "cudaMalloc", "cuMemAlloc_v2"]
STARTUP = ["_start", "__libc_start_main", "main (python.c:15)", "Py_RunMain"]
SHORT_KINDS = ("user", "python")
SMALLER = "(smaller stacks)"


class Strings:
    def __init__(self):
        self.list, self.index = [""], {"": 0}

    def id(self, text):
        if text not in self.index:
            self.index[text] = len(self.list)
            self.list.append(text)
        return self.index[text]


class Tree:
    """Stacks as a trie, root first: node 0 is the root."""

    def __init__(self):
        self.parent, self.name, self.child = [-1], [0], [{}]

    def add_path(self, names):
        node = 0
        for n in names:
            nxt = self.child[node].get(n)
            if nxt is None:
                nxt = len(self.parent)
                self.parent.append(node)
                self.name.append(n)
                self.child.append({})
                self.child[node][n] = nxt
            node = nxt
        return node

    def json(self):
        return {"parent": self.parent, "name": self.name}


def frame_kind(label):
    if label in USER_FRAMES or label.startswith(("Trainer", "build_", "attention_kernel")):
        return "user"
    if ".py:" in label and "torch/" not in label:
        return "python"
    return "library"


def make_frames(rng, strings, distinct):
    """A pool of distinct frame labels: user, python and library frames mixed."""
    pool = []
    for i in range(distinct):
        r = rng.random()
        if r < 0.35:
            label = rng.choice(PY_FRAMES).format(10 + i)
        elif r < 0.55:
            label = "%s_%d (src/ops_%d.cpp:%d)" % (rng.choice(["launch", "alloc", "prepare", "reduce"]),
                                                   i, i % 97, 10 + i % 900)
        else:
            label = rng.choice(LIB_FRAMES) + ("" if i < 40 else " [%d]" % i)
        pool.append(label)
    return pool


def make_stacks(rng, strings, n_stacks, target_nodes):
    """Random stacks sharing prefixes, grown until the full tree has target_nodes nodes."""
    all_tree, short_tree = Tree(), Tree()
    pool = make_frames(rng, strings, max(200, target_nodes // 3))
    smaller = (all_tree.add_path([strings.id(SMALLER)]), short_tree.add_path([strings.id(SMALLER)]))
    stacks, paths = [], [[strings.id(s) for s in STARTUP]]
    while len(stacks) < n_stacks or len(all_tree.parent) < target_nodes:
        base = rng.choice(paths)
        keep = rng.randrange(len(STARTUP), len(base) + 1)
        path = base[:keep] + [strings.id(rng.choice(pool)) for _ in range(rng.randrange(2, 14))]
        if len(path) > 70:
            path = path[:70]
        paths.append(path)
        short = [n for n in path if frame_kind(strings.list[n]) in SHORT_KINDS] or path[-1:]
        stacks.append({"short": short_tree.add_path(short), "all": all_tree.add_path(path)})
        if len(stacks) > 20 * n_stacks:
            break
    return all_tree, short_tree, stacks, smaller


def split(rng, total, parts):
    """total as `parts` non-negative integers (multiples of 512 where possible) that add up."""
    if parts <= 1:
        return [total]
    weights = [rng.random() ** 3 for _ in range(parts)]
    s = sum(weights) or 1.0
    out = [int(total * w / s) // 512 * 512 for w in weights]
    out[0] += total - sum(out)
    return out


def live_sets(rng, stacks, smaller, total, n):
    """The live set of `total` bytes: `n` stacks plus the (smaller stacks) rest, as node/bytes pairs
    in each tree; the same allocations in both."""
    chosen = rng.sample(range(len(stacks)), min(n, len(stacks)))
    kept = split(rng, int(total * 0.97), len(chosen))
    rest = total - sum(kept)
    live = {}
    for kind, smaller_node in (("all", smaller[0]), ("short", smaller[1])):
        acc = {}
        for s, b in zip(chosen, kept):
            node = stacks[s][kind]
            acc[node] = acc.get(node, 0) + b
        if rest:
            acc[smaller_node] = acc.get(smaller_node, 0) + rest
        live[kind] = [x for node, b in sorted(acc.items()) if b for x in (node, b)]
    return live, chosen, kept


def hexaddr(a):
    return "0x%x" % a


def allocated_curve(rng, n, peak_bytes):
    """A training-loop shape: a base that grows, a sawtooth per step, noise; one clear peak."""
    vals, base = [], 0.15
    step_len = max(50, n // 300)
    peak_at = int(n * 0.62)
    for i in range(n):
        base = min(0.55, base + 0.4 / n)
        phase = (i % step_len) / step_len
        v = base + 0.3 * phase + 0.03 * rng.random()
        if abs(i - peak_at) < 3:
            v = 1.0
        vals.append(min(0.97, v) if i != peak_at else 1.0)
    return [int(v * peak_bytes) // 512 * 512 for v in vals], peak_at


def owner_split(rng, allocated, n_owners):
    """Per-owner bytes for each point, adding up to allocated exactly (fixed shares plus jitter)."""
    shares = [0.72, 0.14, 0.09, 0.05][:n_owners]
    out = [[] for _ in range(n_owners)]
    for a in allocated:
        rest = a
        for o in range(n_owners - 1, 0, -1):
            b = int(a * shares[o] * (0.9 + 0.2 * rng.random())) // 512 * 512
            b = min(b, rest)
            out[o].append(b)
            rest -= b
        out[0].append(rest)
    return out


def levels(t, allocated, reserved, by_owner, bucket_counts, owner_levels):
    """Coarse to fine: bucketed levels (max allocated per bucket), then the exact one."""
    out = []
    n = len(t)
    for li, buckets in enumerate(bucket_counts):
        lt, la, lr, lo = [], [], [], [[] for _ in by_owner]
        for b in range(buckets):
            lo_i, hi_i = b * n // buckets, (b + 1) * n // buckets
            if hi_i <= lo_i:
                continue
            best = max(range(lo_i, hi_i), key=lambda i: allocated[i])
            lt.append(t[best])
            la.append(allocated[best])
            lr.append(reserved[best])
            for o in range(len(by_owner)):
                lo[o].append(by_owner[o][best])
        out.append({"t": lt, "allocated": la, "reserved": lr,
                    "by_owner": lo if li < owner_levels else None})
    out.append({"t": t, "allocated": allocated, "reserved": reserved, "by_owner": None})
    return out


def segments_for(rng, allocated_target, count, big_share):
    """`count` segments, largest first, whose blocks add up to allocated_target (free holes between)."""
    sizes = sorted([(rng.choice([2, 2, 20, 64, 512]) if rng.random() > big_share else 1024) * MiB
                    for _ in range(count)], reverse=True)
    reserved = sum(sizes)
    if allocated_target > reserved * 0.9:
        allocated_target = int(reserved * 0.9)
    want = split(rng, allocated_target, count)
    segs, base = [], 0x7f0000000000
    for size, fill in zip(sizes, want):
        fill = min(fill, size)
        blocks, off = [], 0
        remaining = fill
        while remaining > 0 and off < size:
            gap = rng.choice([0, 0, 0, 512, 4096, 1 * MiB]) if off else 0
            off += gap
            room = size - off
            if room <= 0:
                break
            b = min(remaining, room, max(512, int(rng.random() ** 2 * size / 6) // 512 * 512))
            blocks += [off, b]
            off += b
            remaining -= b
        segs.append({"addr": hexaddr(base), "size": size, "blocks": blocks})
        base += size + 2 * MiB
    return segs


def largest_free(segs):
    best = 0
    for s in segs:
        pos, bl = 0, s["blocks"]
        for i in range(0, len(bl), 2):
            best = max(best, bl[i] - pos)
            pos = bl[i] + bl[i + 1]
        best = max(best, s["size"] - pos)
    return best


def layout(label, t, entry, segs, omitted, omitted_bytes, verdict):
    alloc = sum(sum(s["blocks"][1::2]) for s in segs)
    return {"label": label, "t": t, "entry": entry,
            "reserved_bytes": sum(s["size"] for s in segs) + omitted_bytes,
            "allocated_bytes": alloc, "largest_free_block_bytes": largest_free(segs),
            "verdict": verdict, "segments": segs, "segments_omitted": omitted}


def top_of(rng, chosen, kept, n_owners):
    pairs = sorted(zip(kept, chosen), reverse=True)[:10]
    return [{"bytes": b, "addr": hexaddr(0x7f0000000000 + rng.randrange(1 << 30) * 512),
             "owner": rng.randrange(n_owners), "stack": s} for b, s in pairs]


def make_device(rng, spec, dev, stacks, smaller, n_owners):
    n = spec["points"]
    span_us = spec["span_us"]
    t = list(range(n)) if spec.get("entries") else sorted(rng.sample(range(span_us), n))
    peak_bytes = spec["peak_bytes"] if dev >= 0 else 2 * GiB
    allocated, peak_i = allocated_curve(rng, n, peak_bytes)
    reserved, r = [], 0
    for a in allocated:
        r = max(r, -(-a // (20 * MiB)) * 20 * MiB)
        reserved.append(r)
    by_owner = owner_split(rng, allocated, n_owners if dev >= 0 else 1)
    series = levels(t, allocated, reserved, by_owner, spec["buckets"], spec["owner_levels"])
    oom_is = [int(n * f) for f in spec["ooms"]] if dev >= 0 else []
    ooms, markers = [], [{"kind": "peak", "t": t[peak_i], "label": "peak"}]
    moments_at = [(peak_i, "peak")]
    for k, i in enumerate(oom_is):
        markers.append({"kind": "oom", "t": t[i], "label": "out of memory %d" % (k + 1)})
        moments_at.append((i, "out of memory %d" % (k + 1)))
    for k in range(spec["annotations"]):
        i = (k + 1) * n // (spec["annotations"] + 1)
        markers.append({"kind": "annotation", "t": t[i], "label": "epoch %d" % (k + 1)})
    markers.append({"kind": "snapshot", "t": t[-1], "label": "snapshot (exit)"})
    moments_at.append((n - 1, "end"))
    for k in range(spec["moments"]):
        moments_at.append(((k * (n - 1)) // max(1, spec["moments"] - 1), None))
    moments = []
    seen = set()
    for i, label in sorted(moments_at, key=lambda m: (m[0], m[1] is None)):
        if i in seen:
            continue
        seen.add(i)
        total = allocated[i]
        live, chosen, kept = live_sets(rng, stacks, smaller, total, spec["live_stacks"])
        moments.append({"t": t[i], "entry": i, "label": label or "", "allocated_bytes": total,
                        "reserved_bytes": reserved[i],
                        "live": live,
                        "by_owner": [by_owner[o][i] if o < len(by_owner) else 0 for o in range(n_owners)],
                        "top": top_of(rng, chosen, kept, n_owners if dev >= 0 else 1)})
    leak_total = 0 if spec.get("entries") else allocated[-1] // 3 // 512 * 512
    llive, lchosen, lkept = live_sets(rng, stacks, smaller, leak_total, spec["live_stacks"] // 2)
    leak_by_owner = split(rng, leak_total, n_owners if dev >= 0 else 1)
    leaks = {"bytes": leak_total, "count": len(lchosen) * 3,
             "by_owner": [[o, b, 3 * len(lchosen) // len(leak_by_owner)] for o, b in enumerate(leak_by_owner)],
             "live": llive,
             "top": top_of(rng, lchosen, lkept, n_owners if dev >= 0 else 1)}
    if not leak_total:
        leaks = {"bytes": 0, "count": 0, "by_owner": [], "live": {"short": [], "all": []}, "top": []}
    layouts = []
    omitted = spec["segments_omitted"]
    if spec["segments"]:
        segs = segments_for(rng, allocated[peak_i], spec["segments"], spec["big_segments"])
        layouts.append(layout("peak", t[peak_i], peak_i, segs, omitted, omitted * 2 * MiB, None))
    for k, i in enumerate(oom_is):
        segs = segments_for(rng, allocated[i], spec["segments"], spec["big_segments"])
        lay = layout("out of memory %d" % (k + 1), t[i], i, segs, omitted, omitted * 2 * MiB, None)
        requested = lay["largest_free_block_bytes"] + 64 * MiB
        free_in = lay["reserved_bytes"] - lay["allocated_bytes"]
        fits = requested <= free_in
        verdict = ("fragmentation: %.2f GiB free in the segments, but no free block of %.2f GiB"
                   % (free_in / GiB, requested / GiB) if fits
                   else "over capacity: the request exceeds all free memory")
        lay["verdict"] = verdict
        layouts.append(lay)
        ooms.append({"t": t[i], "entry": i, "requested_bytes": requested,
                     "device_free_bytes": 12 * MiB if k == 0 else None,
                     "reserved_bytes": lay["reserved_bytes"], "allocated_bytes": lay["allocated_bytes"],
                     "free_in_segments_bytes": free_in,
                     "largest_free_block_bytes": lay["largest_free_block_bytes"],
                     "fits_without_fragmentation": fits, "verdict": verdict,
                     "stack": rng.randrange(len(stacks))})
    return {"device": dev, "title": "pinned host memory" if dev < 0 else "device %d" % dev,
            "series": series,
            "peak": {"t": t[peak_i], "entry": peak_i, "allocated_bytes": allocated[peak_i],
                     "reserved_bytes": reserved[peak_i]},
            "end": {"allocated_bytes": allocated[-1], "reserved_bytes": reserved[-1]},
            "markers": markers, "moments": moments, "leaks": leaks, "ooms": ooms, "layouts": layouts}


SPECS = {
    "small": {"devices": [0, 1, -1], "points": 3000, "span_us": 90_000_000, "peak_bytes": 30 * GiB,
              "buckets": [500], "owner_levels": 1, "ooms": [0.8], "annotations": 6, "moments": 40,
              "live_stacks": 60, "stacks": 300, "nodes": 3000, "segments": 40, "segments_omitted": 0,
              "big_segments": 0.3},
    # A PyTorch file without times (x is the entry index), one device, nothing leaked, no segments
    # recorded: the page's empty states.
    "entries": {"devices": [0], "points": 2500, "span_us": 2500, "peak_bytes": 6 * GiB, "entries": True,
                "buckets": [400], "owner_levels": 1, "ooms": [], "annotations": 0, "moments": 20,
                "live_stacks": 30, "stacks": 100, "nodes": 800, "segments": 0, "segments_omitted": 0,
                "big_segments": 0.3},
    "big": {"devices": [0, -1], "points": 300_000, "span_us": 4 * 3600 * 1_000_000, "peak_bytes": 78 * GiB,
            "buckets": [2000, 8000, 40000], "owner_levels": 2, "ooms": [0.7, 0.9], "annotations": 120,
            "moments": 240, "live_stacks": 600, "stacks": 8000, "nodes": 50_000, "segments": 400,
            "segments_omitted": 37, "big_segments": 0.2},
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SPECS:
        print("usage: make_sample_data.py small|entries|big OUT.json", file=sys.stderr)
        return 2
    name = sys.argv[1]
    spec = SPECS[name]
    rng = random.Random(15)
    strings = Strings()
    all_tree, short_tree, stacks, smaller = make_stacks(rng, strings, spec["stacks"], spec["nodes"])
    owners = ["pytorch caching allocator", "nccl", "cudaMalloc (direct)", "cuBLAS workspace"]
    devices = [make_device(rng, dict(spec, points=spec["points"] if d >= 0 else spec["points"] // 10),
                           d, stacks, smaller, len(owners)) for d in spec["devices"]]
    data = {
        "schema_version": 1,
        "header": {"file": "/scratch/run42/memtrace-%s.pickle" % name,
                   "producer": "pytorch" if spec.get("entries") else "memtrace",
                   "exe": "/usr/bin/python3 train.py --model llama-7b --batch 8" + (
                       " --tag '</script><!--<b>x</b>'" if name == "small" else ""), "pid": 48213, "rank": 0,
                   "host": "gpu-node-017", "reason": "exit", "t0_us": 1_767_000_000_000_000,
                   "x_unit": "entry" if spec.get("entries") else "us", "first": 0, "last": spec["span_us"],
                   "truncated": name == "big", "entries_dropped": 1_250_000 if name == "big" else 0,
                   "settings": [] if spec.get("entries") else [["MEMTRACE_RING_ENTRIES", "500000"], ["MEMTRACE_STACK_DEPTH", "64"],
                                ["MEMTRACE_PYTHON_FRAMES", "1"], ["MEMTRACE_DUMP_ON", "exit,oom,SIGUSR2"]],
                   "parts": [] if spec.get("entries") else [{"owner": "torch", "source": "pytorch", "from": "torch.pickle", "live_bytes": 61 * GiB},
                                                            {"owner": "nccl", "source": "memtrace", "from": "memtrace.pickle", "live_bytes": 9 * GiB}],
                   "memtrace_version": "0.1.0"},
        "strings": strings.list,
        "owners": owners,
        "trees": {"short": short_tree.json(), "all": all_tree.json()},
        "stacks": stacks,
        "devices": devices,
    }
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
