#!/usr/bin/env python3
"""Peak reserved, peak allocated and fragmentation of the three synthetic workloads of tests/replay
(a training loop with a growing activation stack, a variable-length inference loop, a
fragmentation-heavy mix) under PyTorch's policy, expandable segments and memtrace's remap policy,
by running `memtrace replay --json` on the recorded fixtures (recorded with PyTorch's default
settings by the independent Python reference), and the replay's own time.

    python3 bench/bench_replay_workloads.py [BUILD_DIR]
"""
import json
import os
import subprocess
import sys
import time

WORKLOADS = [("training loop", "training_default.pickle"),
             ("variable-length inference", "inference_default.pickle"),
             ("fragmentation-heavy mix", "fragmentation_default.pickle")]
CONFS = [("PyTorch default", ""), ("expandable_segments", "expandable_segments:True"),
         ("memtrace remap", "memtrace_policy:remap")]


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "tests", "replay", "data")
    tool = os.path.join(build, "bin", "memtrace")
    mib = lambda b: f"{b / 2**20:8.1f}"
    print(f"{'workload':28s} {'configuration':22s} {'peak rsv':>9s} {'peak alloc':>10s} "
          f"{'frag@peak':>9s} {'largest free':>12s} {'driver calls':>12s}   (MiB)")
    for name, fixture in WORKLOADS:
        args = [tool, "replay", os.path.join(data, fixture), "--json"]
        for _, conf in CONFS:
            args += ["--alloc-conf", conf]
        t = time.perf_counter()
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        secs = time.perf_counter() - t
        rep = json.loads(out)
        for (label, _), c in zip(CONFS, rep["configurations"]):
            calls = sum(c["driver_calls"][k] for k in ("segment_allocs", "segment_frees", "maps", "unmaps"))
            print(f"{name:28s} {label:22s} {mib(c['peak_reserved_bytes'])}  {mib(c['peak_allocated_bytes'])}  "
                  f"{mib(c['fragmentation_at_peak_bytes'])}  {mib(c['largest_free_at_peak_bytes'])}     {calls:8d}")
        print(f"{'':28s} ({rep['replayed']['events']} events replayed x 3 configurations in {secs:.2f} s)")


if __name__ == "__main__":
    main()
