#!/usr/bin/env python3
"""Writes the replay test's fixtures under tests/replay/data/: snapshots the reference allocator
(reference_allocator.py) recorded for the four workloads (workloads.py) under several settings,
and fixtures.json with each file's settings and the reference's own figures.

The generated files are committed; rerun this after changing the reference or a workload
(`python3 tests/replay/make_fixtures.py`), and the test `replay.fixtures_current` checks they match.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reference_snapshot  # noqa: E402
import workloads  # noqa: E402
from reference_allocator import MIB  # noqa: E402

# name, workload, PYTORCH_CUDA_ALLOC_CONF, device capacity (None: 80 GiB), ring size, pickle protocol
FIXTURES = [
    ("training_default", "training", "", None, None, 2),
    ("inference_default", "inference", "", None, None, 2),
    ("fragmentation_default", "fragmentation", "", None, None, 2),
    ("training_expandable", "training", "expandable_segments:True", None, None, 5),
    ("inference_rounding", "inference",
     "max_split_size_mb:20,roundup_power2_divisions:[1:2,4:4,>:8]", None, None, 2),
    ("fragmentation_tight", "fragmentation", "max_split_size_mb:40,max_non_split_rounding_mb:24",
     1600 * MIB, None, 2),
    ("fragmentation_expandable_tight", "fragmentation", "expandable_segments:True", 1500 * MIB, None, 2),
    ("training_truncated", "training", "", None, 600, 2),
    ("phases_default", "phases", "", None, None, 2),
    ("phases_expandable", "phases", "expandable_segments:True", None, None, 4),
]


def build(name, workload, conf, capacity, max_entries):
    kwargs = {"program": workload + ".py"}
    if capacity is not None:
        kwargs["capacity"] = capacity
    return reference_snapshot.run(workloads.WORKLOADS[workload](), conf, max_entries=max_entries, **kwargs)


def main():
    out = os.path.join(HERE, "data")
    os.makedirs(out, exist_ok=True)
    index = {}
    for name, workload, conf, capacity, max_entries, protocol in FIXTURES:
        snapshot, figures = build(name, workload, conf, capacity, max_entries)
        path = os.path.join(out, name + ".pickle")
        reference_snapshot.write(path, snapshot, protocol)
        index[name] = {"workload": workload, "alloc_conf": conf, "capacity": capacity,
                       "max_entries": max_entries, "protocol": protocol, "reference": figures}
        print("%-32s %7d bytes  peak reserved %5d MiB  segments %d  oom %s"
              % (name, os.path.getsize(path), figures["peak_reserved"] // MIB,
                 len(figures["segment_allocs"]), figures["oom"]))
    with open(os.path.join(out, "fixtures.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
