#!/usr/bin/env python3
"""Process-level tests of `memtrace replay`: runs one named case, exits 0 (pass), 1 (fail) or
77 (skip: no memtrace binary).

    python3 tests/replay/run_replay_test.py --memtrace build/bin/memtrace CASE

The snapshots come from reference_allocator.py, a reimplementation of PyTorch's caching-allocator
policy written from docs/caching-allocator.md, "PyTorch's policy, and what memtrace adds",
independently of memtrace's C++ allocator: replaying a snapshot under the settings it was recorded
with must make the reference's segment decisions again (the same segment_alloc sizes in the same
order, the same peaks)."""

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)

import make_fixtures  # noqa: E402
import reference_snapshot  # noqa: E402
import workloads  # noqa: E402
from reference_allocator import MIB  # noqa: E402

SKIP = 77


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def fixtures():
    with open(os.path.join(DATA, "fixtures.json")) as f:
        return json.load(f)


class Memtrace:
    def __init__(self, path):
        self.path = path

    def run(self, *args):
        p = subprocess.run([self.path, "replay", *args], capture_output=True, text=True, timeout=100)
        return p.returncode, p.stdout, p.stderr

    def json(self, *args):
        rc, out, err = self.run("--json", *args)
        check(rc == 0, "memtrace replay %s: exit %d\n%s" % (" ".join(args), rc, err))
        try:
            return json.loads(out), err
        except ValueError as e:
            raise Failure("memtrace replay --json printed no JSON (%s):\n%s" % (e, out[:2000]))


def conf_args(conf, capacity=None):
    args = ["--alloc-conf", conf]
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    return args


def compare(label, got, ref):
    """One replayed configuration against the reference allocator's figures for the same run."""
    problems = []
    if got["segment_alloc_sizes"] != ref["segment_allocs"]:
        problems.append("segment_alloc sizes differ:\n  replay    %s\n  reference %s"
                        % (got["segment_alloc_sizes"][:60], ref["segment_allocs"][:60]))
    if sorted(got["segment_free_sizes"]) != sorted(ref["segment_frees"]):
        problems.append("segment_free sizes differ: replay %s, reference %s"
                        % (got["segment_free_sizes"][:40], ref["segment_frees"][:40]))
    if got["segment_map_sizes"] != ref["segment_maps"]:
        problems.append("segment_map sizes differ:\n  replay    %s\n  reference %s"
                        % (got["segment_map_sizes"][:60], ref["segment_maps"][:60]))
    if sorted(got["segment_unmap_sizes"]) != sorted(ref["segment_unmaps"]):
        problems.append("segment_unmap sizes differ: replay %s, reference %s"
                        % (got["segment_unmap_sizes"][:40], ref["segment_unmaps"][:40]))
    for key in ("peak_reserved", "peak_allocated"):
        if got[key + "_bytes"] != ref[key]:
            problems.append("%s: replay %d, reference %d" % (key, got[key + "_bytes"], ref[key]))
    if problems:
        raise Failure("%s:\n%s" % (label, "\n".join(problems)))


# ---- cases -------------------------------------------------------------------------------------

def case_fixtures_current(mt):
    """The committed fixtures are what make_fixtures.py writes today (the generator is kept honest)."""
    index = fixtures()
    for name, workload, conf, capacity, max_entries, protocol in make_fixtures.FIXTURES:
        snapshot, figures = make_fixtures.build(name, workload, conf, capacity, max_entries)
        with open(os.path.join(DATA, name + ".pickle"), "rb") as f:
            committed = f.read()
        check(pickle.dumps(snapshot, protocol=protocol) == committed,
              "%s.pickle differs from what make_fixtures.py writes; rerun it" % name)
        check(index[name]["reference"] == json.loads(json.dumps(figures)),
              "fixtures.json is stale for %s" % name)
        segs = snapshot["segments"]
        for s in segs:
            check(sum(b["size"] for b in s["blocks"]) == s["total_size"], "%s: blocks do not tile" % name)


def case_match(mt, name):
    """Replaying a reference snapshot under its own settings makes the reference's decisions."""
    fx = fixtures()[name]
    path = os.path.join(DATA, name + ".pickle")
    result, err = mt.json(path, *conf_args(fx["alloc_conf"], fx["capacity"]))
    check(len(result["configurations"]) == 1, "one --alloc-conf, one configuration")
    got = result["configurations"][0]
    check(not got["warnings"], "warnings for a valid conf: %s" % got["warnings"])
    compare(name, got, fx["reference"])
    check(got["matches_recorded"] is True, "%s: replay says it does not match the recording" % name)
    rep = result["replayed"]
    check(rep.get("empty_cache_calls") == fx["reference"]["empty_cache_calls"],
          "%s: %s empty_cache calls replayed, the workload made %d that released something"
          % (name, rep.get("empty_cache_calls"), fx["reference"]["empty_cache_calls"]))
    check(rep["preallocated_segments"] == 0 and rep["skipped"] == 0 and not rep["truncated"],
          "%s: complete history reported as %s" % (name, rep))
    oom = fx["reference"]["oom"]
    if oom is None:
        check(got["oom"] is None, "%s: replay ran out of memory: %s" % (name, got["oom"]))
    else:
        # The recorded failed request (an `oom` entry) is attempted again and fails again.
        trace = load(path)["device_traces"][0]
        first = next(i for i, e in enumerate(trace) if e["action"] == "oom")
        check(got["oom"] is not None and got["oom"]["event_index"] == first,
              "%s: expected the recorded oom at event %d, replay says %s" % (name, first, got["oom"]))


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


WHATIF_CONFS = ["expandable_segments:True",
                "max_split_size_mb:40,roundup_power2_divisions:4",
                "roundup_power2_divisions:[1:4,16:8,>:2],max_non_split_rounding_mb:40,max_split_size_mb:64"]


def case_whatif(mt, workload):
    """A snapshot recorded under PyTorch's defaults, replayed under other settings, gives what the
    reference allocator gives when it runs the same workload under those settings."""
    path = os.path.join(DATA, workload + "_default.pickle")
    ops = workloads.WORKLOADS[workload]()
    args = [path]
    for conf in WHATIF_CONFS:
        args += ["--alloc-conf", conf]
    result, err = mt.json(*args)
    check(len(result["configurations"]) == len(WHATIF_CONFS), "one result per --alloc-conf")
    for conf, got in zip(WHATIF_CONFS, result["configurations"]):
        check(got["alloc_conf"] == conf, "configurations in command-line order")
        _, ref = reference_snapshot.run(ops, conf)
        compare("%s under %s" % (workload, conf), got, ref)


def case_truncated(mt):
    """A history cut by the ring: the replay says so and pre-allocates exactly the blocks that were
    live at the cut (inferred from frees of unknown addresses and from the final segments)."""
    fx = fixtures()["training_truncated"]
    full, _ = reference_snapshot.run(workloads.training(), "", program="training.py")
    trace = full["device_traces"][0]
    cut = len(trace) - fx["max_entries"]
    live = set()
    for e in trace[:cut]:
        if e["action"] == "alloc":
            live.add(e["addr"])
        elif e["action"] == "free_completed":
            live.discard(e["addr"])
    path = os.path.join(DATA, "training_truncated.pickle")
    result, _ = mt.json(path)
    rep = result["replayed"]
    check(rep["truncated"] is True, "truncated history not reported: %s" % rep)
    check(rep["preallocated_segments"] == len(live),
          "pre-allocated %d blocks, %d were live at the cut" % (rep["preallocated_segments"], len(live)))
    kept_allocs = sum(1 for e in trace[cut:] if e["action"] == "alloc")
    check(rep["allocs"] == kept_allocs, "replayed %d allocs, the trace keeps %d" % (rep["allocs"], kept_allocs))
    rc, out, err = mt.run(path)
    check(rc == 0, "human output: exit %d: %s" % (rc, err))
    check("truncated" in out and "pre-allocated" in out and str(len(live)) in out,
          "human output does not say what was replayed:\n%s" % out)


def case_capacity_oom(mt):
    """--capacity below what the workload needs: the replay names the same failing request as the
    reference allocator running with that capacity, and the human output says out of memory."""
    ops = workloads.inference()
    snap_path = os.path.join(DATA, "inference_default.pickle")
    trace = load(snap_path)["device_traces"][0]
    allocs = [i for i, e in enumerate(trace) if e["action"] == "alloc"]
    for conf, capacity in (("", 100 * MIB), ("", 86 * MIB), ("expandable_segments:True", 113 * MIB),
                           ("expandable_segments:True", 100 * MIB)):
        _, ref = reference_snapshot.run(ops, conf, capacity=capacity)
        check(ref["oom"] is not None, "reference does not run out at %d" % capacity)
        result, _ = mt.json(snap_path, "--alloc-conf", conf, "--capacity", str(capacity))
        got = result["configurations"][0]
        oom = got["oom"]
        what = "%r at %d MiB" % (conf, capacity // MIB)
        check(oom is not None, "no OOM reported: " + what)
        check(oom["alloc_ordinal"] == ref["oom"]["alloc_ordinal"],
              "%s: OOM at alloc #%d, reference at #%d" % (what, oom["alloc_ordinal"], ref["oom"]["alloc_ordinal"]))
        check(oom["event_index"] == allocs[ref["oom"]["alloc_ordinal"]], what + ": OOM event index")
        check(oom["requested_bytes"] == ref["oom"]["size"] and not oom["recorded"], what + ": OOM request")
        # Failed requests are left out and the replay goes on, as the reference's workload does.
        check(got["peak_reserved_bytes"] == ref["peak_reserved"] and got["peak_allocated_bytes"] == ref["peak_allocated"],
              what + ": peaks after the OOM differ from the reference's")
    result, _ = mt.json(snap_path, "--alloc-conf", "", "--capacity", "1GiB")
    check(result["configurations"][0]["oom"] is None, "OOM reported with room to spare")
    check(result["capacity_bytes"] == 1 << 30, "--capacity 1GiB read as %s" % result["capacity_bytes"])
    rc, out, err = mt.run(snap_path, "--capacity", "86MiB")
    check(rc == 0 and "out of memory" in out.lower(), "human output does not report the OOM:\n%s" % out)


def release_runs(trace):
    """(index of the first entry, action of the entry after) of each run of consecutive
    segment_free/segment_unmap entries."""
    runs, i = [], 0
    while i < len(trace):
        if trace[i]["action"] not in ("segment_free", "segment_unmap"):
            i += 1
            continue
        j = i
        while j < len(trace) and trace[j]["action"] in ("segment_free", "segment_unmap"):
            j += 1
        runs.append((i, trace[j]["action"] if j < len(trace) else None))
        i = j
    return runs


def case_empty_cache(mt):
    """The program's torch.cuda.empty_cache() calls are replayed (issue 12). On a workload that
    empties the cache between phases, the replay under the recorded settings gives back what the
    recording gave back and peaks where it peaked; before, it kept every phase's segments (peak
    reserved 2.18 GiB against 1.62 GiB recorded, 0 segment frees against 30). Releases made inside an
    allocation (the out-of-memory retry, max_split_size) are not taken for empty_cache calls."""
    fx = fixtures()["phases_default"]
    ref = fx["reference"]
    path = os.path.join(DATA, "phases_default.pickle")
    trace = load(path)["device_traces"][0]
    runs = release_runs(trace)
    check(ref["empty_cache_calls"] == len(runs) == 6, "the workload's calls: %d runs" % len(runs))
    check([a for _, a in runs].count("segment_alloc") == 1,
          "one call is followed at once by a new segment (told apart by its stack): %s" % runs)
    result, _ = mt.json(path, "--alloc-conf", "")
    rep, got = result["replayed"], result["configurations"][0]
    check(rep.get("empty_cache_calls") == 6 and rep.get("allocation_releases") == 0,
          "replayed: %s, expected 6 empty_cache calls and no release inside an allocation" % rep)
    check(got["peak_reserved_bytes"] == ref["peak_reserved"],
          "peak reserved %d, recorded %d" % (got["peak_reserved_bytes"], ref["peak_reserved"]))
    check(sorted(got["segment_free_sizes"]) == sorted(ref["segment_frees"]),
          "segment frees: replay %d (%d bytes), recorded %d (%d bytes)"
          % (len(got["segment_free_sizes"]), sum(got["segment_free_sizes"]), len(ref["segment_frees"]),
             sum(ref["segment_frees"])))
    check(got.get("empty_cache_released_bytes") == sum(ref["segment_frees"]),
          "empty_cache gave back %s bytes, the recording %d" % (got.get("empty_cache_released_bytes"), sum(ref["segment_frees"])))
    check(got["matches_recorded"] is True, "recorded decisions not reproduced")
    # Every configuration makes the calls (the what-if figures are checked by whatif.phases).
    result, _ = mt.json(path)
    for c in result["configurations"]:
        check(c["empty_cache_released_bytes"] > 0, "%s: the empty_cache calls gave nothing back" % c["label"])
    rc, out, _ = mt.run(path)
    check(rc == 0 and "6 empty_cache calls" in out and "same segment decisions" in out,
          "human output:\n%s" % out)

    # Releases of the out-of-memory path carry the allocation's stack: left to the allocator.
    for name in ("fragmentation_tight", "fragmentation_expandable_tight"):
        f = fixtures()[name]
        p = os.path.join(DATA, name + ".pickle")
        n = len(release_runs(load(p)["device_traces"][0]))
        result, _ = mt.json(p, *conf_args(f["alloc_conf"], f["capacity"]))
        rep = result["replayed"]
        check(n > 0 and rep["empty_cache_calls"] == 0 and rep["allocation_releases"] == n,
              "%s: %d out-of-memory releases read as %s" % (name, n, rep))

    with tempfile.TemporaryDirectory() as tmp:
        # Without stacks a call followed at once by a new segment looks like an out-of-memory retry.
        snap = load(path)
        for e in snap["device_traces"][0]:
            e["frames"] = []
        p = os.path.join(tmp, "nostacks.pickle")
        reference_snapshot.write(p, snap)
        rep = mt.json(p, "--alloc-conf", "")[0]["replayed"]
        check((rep["empty_cache_calls"], rep["allocation_releases"]) == (5, 1), "without stacks: %s" % rep)
        # memtrace's allocator has no empty_cache the program can call: none in its snapshots.
        snap = load(path)
        snap["allocator_settings"]["memtrace"] = {"allocator": "caching", "entries_dropped": 0, "pid": 4242}
        p = os.path.join(tmp, "memtrace.pickle")
        reference_snapshot.write(p, snap)
        rep = mt.json(p, "--alloc-conf", "")[0]["replayed"]
        check(rep["empty_cache_calls"] == 0 and rep["allocation_releases"] == 0, "memtrace snapshot: %s" % rep)


def case_bad_file(mt):
    with tempfile.TemporaryDirectory() as tmp:
        garbage = os.path.join(tmp, "garbage.pickle")
        with open(garbage, "wb") as f:
            f.write(b"this is not a pickle\n" * 10)
        cut = os.path.join(tmp, "cut.pickle")
        with open(os.path.join(DATA, "training_default.pickle"), "rb") as f:
            data = f.read()
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        other = os.path.join(tmp, "list.pickle")
        with open(other, "wb") as f:
            pickle.dump([1, 2, 3], f)
        for path in (garbage, cut, other, os.path.join(tmp, "missing.pickle")):
            for extra in ([], ["--json"]):
                rc, out, err = mt.run(path, *extra)
                check(rc == 2, "%s: exit %d, expected 2" % (os.path.basename(path), rc))
                lines = [l for l in err.splitlines() if l.strip()]
                check(len(lines) == 1, "%s: expected one error line, got %r" % (os.path.basename(path), err))
                check(out == "", "%s: printed to stdout on error: %r" % (os.path.basename(path), out[:200]))


def case_unknown_key(mt):
    """An unknown key is warned about, not fatal; the keys around it still apply."""
    path = os.path.join(DATA, "training_default.pickle")
    conf = "no_such_key:7,max_split_size_mb:40"
    result, err = mt.json(path, "--alloc-conf", conf)
    got = result["configurations"][0]
    check(any("no_such_key" in w for w in got["warnings"]), "no warning in JSON: %s" % got["warnings"])
    check("no_such_key" in err, "no warning on stderr: %r" % err)
    _, ref = reference_snapshot.run(workloads.training(), "max_split_size_mb:40")
    compare("training under " + conf, got, ref)


def case_usage(mt):
    rc, out, err = mt.run("--help")
    check(rc == 0 and "--alloc-conf" in out and "--capacity" in out, "--help: exit %d\n%s" % (rc, out))
    rc, out, err = mt.run()
    check(rc == 2 and err.strip(), "no snapshot: exit %d" % rc)
    rc, out, err = mt.run(os.path.join(DATA, "training_default.pickle"), "--capacity", "lots")
    check(rc == 2 and "capacity" in err, "bad --capacity: exit %d %r" % (rc, err))
    rc, out, err = mt.run(os.path.join(DATA, "training_default.pickle"), "--bogus")
    check(rc == 2, "unknown option: exit %d" % rc)
    # The default run (recorded settings plus the comparisons) prints sizes for people.
    rc, out, err = mt.run(os.path.join(DATA, "training_default.pickle"))
    check(rc == 0 and "MiB" in out and "peak reserved" in out, "human output:\n%s\n%s" % (out, err))


def entry(action, addr, size, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 1767225600000000,
            "compile_context": "", "user_metadata": ""}


def case_pairing(mt):
    """A block goes back to the pool at its free_completed, not at its free_requested (record_stream
    delays the completion): a request in between must not get it."""
    from reference_allocator import Settings
    seg, kib = 0x7F0000000000, 1024
    trace = [entry("segment_alloc", seg, 2 * MIB),
             entry("alloc", seg, 600 * kib),
             entry("free_requested", seg, 600 * kib),
             entry("alloc", seg + 600 * kib, 600 * kib),      # the first block is still in use
             entry("free_completed", seg, 600 * kib),
             entry("alloc", seg, 600 * kib),                  # now it is reused
             entry("free_requested", seg + 600 * kib, 600 * kib),
             entry("free_completed", seg + 600 * kib, 600 * kib),
             entry("free_requested", seg, 600 * kib),
             entry("free_completed", seg, 600 * kib)]
    snap = {"segments": [{"device": 0, "address": seg, "total_size": 2 * MIB, "stream": 0,
                          "segment_type": "small", "frames": [],
                          "blocks": [{"size": 2 * MIB, "requested_size": 0, "state": "inactive", "frames": []}]}],
            "device_traces": [trace], "allocator_settings": Settings("").as_snapshot_dict()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pairing.pickle")
        reference_snapshot.write(path, snap)
        result, _ = mt.json(path, "--alloc-conf", "")
    got = result["configurations"][0]
    check(got["peak_allocated_bytes"] == 1200 * kib, "peak allocated %d: a block was reused before its "
          "free_completed" % got["peak_allocated_bytes"])
    check(got["segment_alloc_sizes"] == [2 * MIB] and got["matches_recorded"] is True, "segments: %s" % got)
    rep = result["replayed"]
    check((rep["allocs"], rep["frees"], rep["skipped"], rep["preallocated_segments"]) == (3, 3, 0, 0), "counts: %s" % rep)


def case_memtrace_dropped(mt):
    """memtrace's own snapshots say how many history entries were overwritten before the dump
    (allocator_settings['memtrace']['entries_dropped']): the replay reports the history truncated."""
    snap = load(os.path.join(DATA, "training_default.pickle"))
    snap["allocator_settings"]["memtrace"] = {"allocator": "caching", "entries_dropped": 17, "pid": 4242}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "memtrace.pickle")
        reference_snapshot.write(path, snap)
        result, _ = mt.json(path, "--alloc-conf", "")
        rc, out, _ = mt.run(path)
    check(result["producer"] == "memtrace", "producer: %s" % result["producer"])
    rep = result["replayed"]
    check(rep["truncated"] is True and rep["entries_dropped"] == 17, "dropped entries not reported: %s" % rep)
    check(result["configurations"][0]["matches_recorded"] is None, "a truncated history cannot match")
    check(rc == 0 and "17 entries dropped" in out, "human output:\n%s" % out)


def case_default_configs(mt):
    """Without --alloc-conf: the recorded settings first (reproduced), then expandable segments and
    memtrace's own policy."""
    fx = fixtures()["inference_rounding"]
    result, _ = mt.json(os.path.join(DATA, "inference_rounding.pickle"))
    confs = [c["alloc_conf"] for c in result["configurations"]]
    check(confs == [fx["alloc_conf"], "expandable_segments:True", "memtrace_policy:remap"],
          "default configurations: %s" % confs)
    compare("inference_rounding as recorded", result["configurations"][0], fx["reference"])
    check(result["configurations"][0]["matches_recorded"] is True, "recorded settings not reproduced")
    remap = result["configurations"][2]
    check(remap["policy"] == "remap", "memtrace_policy:remap not applied: %s" % remap["policy"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memtrace", required=True)
    ap.add_argument("case")
    a = ap.parse_args()
    if not os.access(a.memtrace, os.X_OK):
        print("skip: %s not built" % a.memtrace)
        return SKIP
    mt = Memtrace(a.memtrace)
    kind, _, arg = a.case.partition(".")
    fn = globals().get("case_" + kind)
    if fn is None:
        print("unknown case %s" % a.case)
        return 1
    try:
        fn(mt, arg) if arg else fn(mt)
    except Failure as e:
        print("FAIL %s: %s" % (a.case, e))
        return 1
    print("ok %s" % a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
