#!/usr/bin/env python3
"""Process-level tests of memtrace: runs one named case and exits 0 (pass), 1 (fail) or 77 (skip).

    python3 tests/process/run_case.py --build-dir build --source-dir . CASE
    python3 tests/process/run_case.py --list

Each case runs small programs (tests/process/*.c, built into build/tests/process/bin) on the
simulated device, with LD_PRELOAD=build/lib/libmemtrace.so and MEMTRACE_OUTPUT in a temporary
directory, reads the snapshot back with pickle and compares it with what the program printed
(the protocol is described in mt_case.h), and runs output/tests/check_snapshot.py on it.
Plain python3, no third-party modules. Set MEMTRACE_TEST_KEEP=1 to keep the temporary files.
"""
FREE_FAILED_NOTE = "memtrace: free failed, still allocated"
import argparse
import glob
import json
import os
import pickle
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77


class Skip(Exception):
    pass


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# --------------------------------------------------------------------------------------------
# The program's side: the line protocol of mt_case.h
# --------------------------------------------------------------------------------------------

class ProgramOutput:
    """What a test program said it did (one process: the parent, or the child with CHILD lines)."""

    def __init__(self, text, child=False):
        self.rcs = []        # [(label, code)]
        self.events = []     # [('ALLOC', kind, addr, requested, segment) | ('FREE', kind, addr)]
        self.ooms = []       # [bytes]
        self.counts = {}     # name -> int
        self.syms = {}       # label -> (pointer, module, symbol)
        self.statuses = {}   # label -> int (STATUS lines)
        self.values = {}     # other KEY value lines: first word -> list of the rest
        self.done = False
        self.stopped = None
        for raw in text.splitlines():
            line = raw
            if child:
                if not line.startswith("CHILD "):
                    continue
                line = line[len("CHILD "):]
            elif line.startswith("CHILD "):
                continue
            f = line.split()
            if not f:
                continue
            k = f[0]
            try:
                if k == "RC" and len(f) == 3:
                    self.rcs.append((f[1], int(f[2])))
                elif k == "ALLOC" and len(f) == 5:
                    self.events.append(("ALLOC", f[1], int(f[2], 16), int(f[3]), int(f[4])))
                elif k == "FREE" and len(f) == 3:
                    self.events.append(("FREE", f[1], int(f[2], 16)))
                elif k == "OOM" and len(f) == 2:
                    self.ooms.append(int(f[1]))
                elif k == "COUNT" and len(f) == 3:
                    self.counts[f[1]] = int(f[2])
                elif k == "SYM" and len(f) == 5:
                    ptr = 0 if f[2] in ("(nil)", "0", "0x0") else int(f[2], 16)
                    self.syms[f[1]] = (ptr, f[3], f[4])
                elif k == "STATUS" and len(f) == 3:
                    self.statuses[f[1]] = int(f[2])
                elif k == "DONE":
                    self.done = True
                elif k == "STOP":
                    self.stopped = " ".join(f[1:])
                else:
                    self.values.setdefault(k, []).append(f[1:])
            except ValueError:
                pass  # a comment that happens to start with a keyword

    def live(self, kind):
        """addr -> (requested, segment) still held at the end, in the order the program made them."""
        held = {}
        for e in self.events:
            if e[1] != kind:
                continue
            if e[0] == "ALLOC":
                held[e[2]] = (e[3], e[4])
            else:
                held.pop(e[2], None)
        return held

    def allocs(self, kind):
        return [e for e in self.events if e[0] == "ALLOC" and e[1] == kind]

    def frees(self, kind):
        return [e for e in self.events if e[0] == "FREE" and e[1] == kind]

    def shape(self):
        """The program's story without addresses: comparable between runs."""
        out = []
        for e in self.events:
            out.append(e[:2] + e[3:] if e[0] == "ALLOC" else e[:2])
        return out


# --------------------------------------------------------------------------------------------
# The snapshot's side
# --------------------------------------------------------------------------------------------

def flatten_traces(traces):
    """host_traces may be a flat list of entries or a list per device: entries either way."""
    out = []
    for t in traces or []:
        if isinstance(t, list):
            out.extend(t)
        else:
            out.append(t)
    return out


class Snapshot:
    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.data = pickle.load(f)
        except Exception as e:  # noqa: BLE001 - any failure to load is the finding
            fail(f"{path}: pickle.load failed: {type(e).__name__}: {e}")
        check(isinstance(self.data, dict), f"{path}: top level is {type(self.data).__name__}, not dict")
        for key in ("segments", "device_traces"):
            check(key in self.data, f"{path}: no '{key}' key (keys: {sorted(self.data)})")
        self.segments = self.data["segments"]
        self.device_traces = self.data["device_traces"]
        check(isinstance(self.segments, list), "segments is not a list")
        check(isinstance(self.device_traces, list) and all(isinstance(t, list) for t in self.device_traces),
              "device_traces is not a list of lists")

    def entries(self):
        """[(device, entry)] over all devices, each device's list in order."""
        return [(d, e) for d, t in enumerate(self.device_traces) for e in t]

    def actions(self, action):
        return [e for _, e in self.entries() if e.get("action") == action]

    def segment_map(self):
        return {s["address"]: s for s in self.segments}

    def host_segments(self):
        return self.data.get("host_segments")

    def host_entries(self):
        return flatten_traces(self.data.get("host_traces"))


def describe_entries(entries, limit=12):
    out = []
    for e in entries[:limit]:
        addr = e.get("addr")
        out.append(f"{e.get('action')}@{hex(addr) if isinstance(addr, int) else addr}:{e.get('size')}"
                   f"[{e.get('category')}]")
    if len(entries) > limit:
        out.append(f"... ({len(entries)} in all)")
    return ", ".join(out)


def check_entry_fields(snap, stacks=True):
    """What memtrace promises on every device trace entry (beyond the viewer's minimum)."""
    for dev, e in snap.entries():
        check(isinstance(e, dict), f"device {dev}: trace entry is {type(e).__name__}")
        a = e.get("action")
        check(isinstance(a, str), f"trace entry without action: {e}")
        check(isinstance(e.get("size"), int), f"{a} entry without int size: {e}")
        check(isinstance(e.get("time_us"), int), f"{a} entry without int time_us: {e}")
        check(isinstance(e.get("category"), str) and e.get("category"), f"{a} entry without category: {e}")
        check("user_metadata" in e, f"{a} entry without user_metadata: {e}")
        if a == "oom":
            check("addr" not in e, f"oom entry has an addr: {e}")
            check(isinstance(e.get("device_free"), int), f"oom entry without int device_free: {e}")
        else:
            check(isinstance(e.get("addr"), int), f"{a} entry without int addr: {e}")
        if stacks and a in ("alloc", "segment_alloc"):
            fr = e.get("frames")
            check(isinstance(fr, list), f"{a} entry without a frames list: {e}")
            for f in fr:
                check(isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("name"), str)
                      and isinstance(f.get("line"), int), f"bad frame {f} in {a} entry")
                check("libmemtrace" not in f["filename"] and "memtrace::" not in f["name"],
                      f"memtrace's own frame in a {a} entry: {f}")


def check_against_program(snap, out, exact=True, category=None, stacks=True, foreign_allocs=False):
    """The snapshot tells the program's story: live segments = what the program still holds;
    every allocation and free it made is in the trace."""
    check_entry_fields(snap, stacks)
    segs = snap.segment_map()
    dev_live = out.live("dev")
    host_live = out.live("host")
    host_addrs = {e[2] for e in out.allocs("host")}

    # Segments.
    for s in snap.segments:
        total = s.get("total_size")
        blocks = s.get("blocks", [])
        check(sum(b.get("size", 0) for b in blocks) == total,
              f"segment {hex(s['address'])}: blocks sum {sum(b.get('size', 0) for b in blocks)} != total_size {total}")
        check(s["address"] not in host_addrs, f"host memory {hex(s['address'])} appears as a device segment")
    for addr, (req, seg) in dev_live.items():
        check(addr in segs, f"live allocation {hex(addr)} ({req} bytes) has no segment; segments: "
                            f"{[hex(a) for a in sorted(segs)]}")
        s = segs[addr]
        check(s["total_size"] == seg, f"segment {hex(addr)}: total_size {s['total_size']}, program says {seg}")
        check(any(b.get("state") == "active_allocated" for b in s.get("blocks", [])),
              f"segment {hex(addr)} has no active_allocated block")
    if exact:
        extra = sorted(set(segs) - set(dev_live))
        check(not extra, f"segments the program does not hold: "
                         f"{[(hex(a), segs[a]['total_size'], segs[a].get('device')) for a in extra]}")

    # Trace: every allocation and free.
    entries = [e for _, e in snap.entries()]
    by_addr = {}
    for e in entries:
        if "addr" in e:
            by_addr.setdefault(e["addr"], []).append(e)
    for ev in out.allocs("dev"):
        _, _, addr, req, seg = ev
        es = by_addr.get(addr, [])
        allocs = [e for e in es if e["action"] == "alloc"]
        check(allocs, f"no alloc entry for {hex(addr)} ({req} bytes); entries there: {describe_entries(es)}")
        check(any(e["size"] in (req, seg) for e in allocs),
              f"alloc entries for {hex(addr)} have sizes {[e['size'] for e in allocs]}, expected {req} (or {seg})")
        segallocs = [e for e in es if e["action"] == "segment_alloc"]
        check(any(e["size"] == seg for e in segallocs),
              f"no segment_alloc of {seg} bytes for {hex(addr)}; entries: {describe_entries(es)}")
        if category is not None:
            cats = {e.get("category") for e in allocs}
            check(category in cats, f"alloc entries for {hex(addr)} have categories {cats}, expected {category!r}")
    frees_expected = {}
    for ev in out.frees("dev"):
        frees_expected[ev[2]] = frees_expected.get(ev[2], 0) + 1
    for addr, n in frees_expected.items():
        es = by_addr.get(addr, [])
        for action in ("free_requested", "free_completed", "segment_free"):
            got = sum(1 for e in es if e["action"] == action)
            check(got >= n, f"{hex(addr)}: {got} {action} entries, the program freed it {n} time(s); "
                            f"entries: {describe_entries(es)}")
    # Per address, events alternate alloc / free in trace order.
    for addr, es in by_addr.items():
        state = False
        for e in es:
            if e["action"] == "alloc":
                check(not state, f"{hex(addr)}: alloc while already allocated: {describe_entries(es)}")
                state = True
            elif e["action"] == "free_completed":
                check(state, f"{hex(addr)}: free_completed of memory not allocated: {describe_entries(es)}")
                state = False
    if exact and not foreign_allocs:
        n_alloc_prog = len(out.allocs("dev"))
        # A free the driver refused is written as free + a fresh alloc marked FREE_FAILED_NOTE
        # (the history is written before the real free, in the driver's order): not a new allocation.
        n_alloc_snap = len([e for e in snap.actions("alloc") if e.get("user_metadata") != FREE_FAILED_NOTE])
        check(n_alloc_snap == n_alloc_prog,
              f"{n_alloc_snap} alloc entries, the program made {n_alloc_prog} device allocations: "
              f"{describe_entries(snap.actions('alloc'))}")
    # Host memory never shows up on the device side.
    for e in entries:
        if e.get("action") in ("alloc", "segment_alloc"):
            check(e["addr"] not in host_addrs, f"host allocation {hex(e['addr'])} recorded in device_traces")

    # Host side.
    if out.allocs("host"):
        hs = snap.host_segments()
        check(hs is not None, f"the program pinned host memory but the snapshot has no host_segments "
                              f"(keys: {sorted(snap.data)})")
        hsmap = {s.get("address"): s for s in hs}
        for addr, (req, seg) in host_live.items():
            check(addr in hsmap, f"live pinned host memory {hex(addr)} ({req} bytes) not in host_segments: "
                                 f"{[hex(a) for a in hsmap if isinstance(a, int)]}")
            check(hsmap[addr].get("total_size") == seg,
                  f"host segment {hex(addr)}: total_size {hsmap[addr].get('total_size')}, expected {seg}")
        if exact:
            extra = sorted(set(hsmap) - set(host_live))
            check(not extra, f"host_segments the program does not hold: {[hex(a) for a in extra]}")
        ht = snap.host_entries()
        check(snap.data.get("host_traces") is not None, "no host_traces in the snapshot")
        for ev in out.allocs("host"):
            check(any(e.get("action") == "alloc" and e.get("addr") == ev[2] for e in ht),
                  f"no alloc entry in host_traces for pinned {hex(ev[2])}: {describe_entries(ht)}")
        for ev in out.frees("host"):
            check(any(e.get("action") in ("free_requested", "free_completed", "segment_free") and e.get("addr") == ev[2]
                      for e in ht), f"no free entry in host_traces for pinned {hex(ev[2])}")


# --------------------------------------------------------------------------------------------
# Running things
# --------------------------------------------------------------------------------------------

class Result:
    def __init__(self, argv, proc, outdir, elapsed):
        self.argv = argv
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.outdir = outdir
        self.elapsed = elapsed
        self.out = ProgramOutput(self.stdout)

    def snapshots(self):
        return sorted(glob.glob(os.path.join(self.outdir, "*.pickle")))

    def on_demand_snapshots(self):
        """Snapshots taken before exit (signal, interval, out-of-memory): the default template
        gets '-<n>' before its extension for them."""
        return [f for f in self.snapshots() if re.search(r"-\d+-\d+\.pickle$", f)]

    def snapshot(self):
        """The exit snapshot."""
        files = [f for f in self.snapshots() if f not in self.on_demand_snapshots()]
        check(len(files) == 1, f"expected one snapshot in {self.outdir}, found {os.listdir(self.outdir)}"
                               f"\n{self.describe()}")
        return Snapshot(files[0])

    def memtrace_lines(self):
        return [l for l in self.stderr.splitlines() if l.startswith("memtrace:")]

    def summary(self):
        """The summary block on stderr: the 'memtrace: summary' line and the indented lines after it."""
        out, inside = [], False
        for line in self.stderr.splitlines():
            if line.startswith("memtrace: summary"):
                out, inside = [line], True
            elif inside and line.startswith(" "):
                out.append(line)
            else:
                inside = False
        return "\n".join(out)

    def warnings(self):
        return [l for l in self.stderr.splitlines() if l.startswith("memtrace: warning")]

    def problems(self):
        """Warnings and errors (a snapshot that could not be written is an error)."""
        return [l for l in self.stderr.splitlines() if l.startswith(("memtrace: warning", "memtrace: error"))]

    def describe(self):
        def tail(s, n=40):
            lines = s.splitlines()
            return "\n".join(("    " + l) for l in lines[-n:])
        return (f"  command: {' '.join(self.argv)}\n  exit status: {self.rc} ({self.elapsed:.2f}s)\n"
                f"  stdout:\n{tail(self.stdout)}\n  stderr:\n{tail(self.stderr)}")


class Context:
    def __init__(self, build, source, keep):
        self.build = os.path.abspath(build)
        self.source = os.path.abspath(source)
        self.preload = os.path.join(self.build, "lib", "libmemtrace.so")
        self.sim = os.path.join(self.build, "lib", "memtrace", "sim")
        self.bindir = os.path.join(self.build, "tests", "process", "bin")
        self.cli = os.path.join(self.build, "bin", "memtrace")
        self.examples = os.path.join(self.build, "bin")
        self.checker = os.path.join(self.source, "output", "tests", "check_snapshot.py")
        self.tmp = tempfile.mkdtemp(prefix="memtrace-test-")
        self.keep = keep
        self.runs = 0
        self.checker_missing = False
        self.checker_module = None
        self.log = []

    def cleanup(self, failed):
        if self.keep or failed:
            print(f"(temporary files kept in {self.tmp})")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # prerequisites -----------------------------------------------------------------------
    def need_preload(self):
        if not os.path.isfile(self.preload):
            raise Skip(f"{self.preload} is not built yet (target memtrace_preload)")

    def need_sim(self, *libs):
        for lib in libs or ("libcuda.so.1",):
            p = os.path.join(self.sim, lib)
            if not os.path.isfile(p):
                raise Skip(f"{p} is not built yet (simulated device)")

    def program(self, name):
        p = os.path.join(self.bindir, name)
        if not os.path.isfile(p):
            raise Skip(f"test program {p} is not built (it needs the sim targets at configure time; "
                       f"re-run cmake and build)")
        return p

    def need_cli(self):
        if not os.path.isfile(self.cli):
            raise Skip(f"{self.cli} is not built (target memtrace_cli)")

    # running -------------------------------------------------------------------------------
    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if not (k.startswith("MEMTRACE_") or k.startswith("SIMCUDA_") or k in ("LD_PRELOAD",))}
        env.pop("LD_LIBRARY_PATH", None)
        return env

    def run(self, argv, preload=True, env=None, lib_path=None, output=None, timeout=20, stdin=None):
        """Runs argv on the simulated device. preload: LD_PRELOAD libmemtrace.so with MEMTRACE_OUTPUT
        in a fresh directory (unless output or env sets it)."""
        self.runs += 1
        outdir = os.path.join(self.tmp, f"run{self.runs:03d}")
        os.makedirs(outdir)
        e = self.base_env()
        e["LD_LIBRARY_PATH"] = lib_path if lib_path is not None else self.sim
        e["MEMTRACE_MAX_ENTRIES"] = "1000000"
        if preload:
            e["LD_PRELOAD"] = self.preload if preload is True else preload
            e["MEMTRACE_OUTPUT"] = output or os.path.join(outdir, "snapshot-%p.pickle")
            # Each run's state file (docs/state-file.md) in its own folder beside the run's: a run
            # that dies leaves its file there, not in the user's runtime folder.
            e["MEMTRACE_STATE_DIR"] = outdir + "-state"
        # Sanitizer builds (scripts/test-sanitizers.sh): the sanitizer's runtime must come first,
        # also in runs without memtrace (the simulated device is instrumented too).
        first = os.environ.get("MEMTRACE_TEST_PRELOAD_FIRST")
        if first:
            e["LD_PRELOAD"] = (first + " " + e.get("LD_PRELOAD", "")).strip()
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=timeout, errors="replace", stdin=stdin or subprocess.DEVNULL)
        except subprocess.TimeoutExpired as ex:
            fail(f"{' '.join(argv)} did not finish within {timeout}s\n  stdout: {ex.stdout}\n  stderr: {ex.stderr}")
        r = Result(argv, p, outdir, time.monotonic() - t0)
        self.log.append(r)
        return r

    def check_snapshot_tool(self, path, subprocess_run=False):
        """output/tests/check_snapshot.py on one file: loaded once and called in this process (its
        main(argv) is what the command line runs), or as a command when subprocess_run is set."""
        if not os.path.isfile(self.checker):
            self.checker_missing = True
            return
        if subprocess_run:
            p = subprocess.run([sys.executable, self.checker, path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60, errors="replace")
            check(p.returncode == 0, f"check_snapshot.py {path} exited {p.returncode}:\n{p.stdout[-4000:]}")
            return
        if self.checker_module is None:
            import importlib.util
            spec = importlib.util.spec_from_file_location("memtrace_check_snapshot", self.checker)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            self.checker_module = mod
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = self.checker_module.main(["check_snapshot.py", path])
        check(rc == 0, f"check_snapshot.py {path} exited {rc}:\n{buf.getvalue()[-4000:]}")


def expect_ok(r, what="program"):
    check(r.rc == 0, f"{what} failed\n{r.describe()}")
    check(r.out.done, f"{what} did not reach its end (no DONE line)\n{r.describe()}")


def same_story(plain, traced, what):
    """A run with memtrace must see exactly what the run without it saw."""
    check(plain.rc == traced.rc, f"{what}: exit status {plain.rc} without memtrace, {traced.rc} with it\n"
                                 f"--- without:\n{plain.describe()}\n--- with:\n{traced.describe()}")
    check(plain.out.rcs == traced.out.rcs,
          f"{what}: return codes differ\n  without: {plain.out.rcs}\n  with:    {traced.out.rcs}\n"
          f"--- with:\n{traced.describe()}")
    check(plain.out.shape() == traced.out.shape(),
          f"{what}: allocations differ\n  without: {plain.out.shape()}\n  with:    {traced.out.shape()}")


def traced_and_checked(ctx, argv, exact=True, category=None, env=None, stacks=True, foreign_allocs=False):
    """Runs with memtrace, checks the program ran to its end and the snapshot tells its story."""
    r = ctx.run(argv, env=env)
    expect_ok(r)
    snap = r.snapshot()
    try:
        check_against_program(snap, r.out, exact=exact, category=category, stacks=stacks,
                              foreign_allocs=foreign_allocs)
    except Failure as f:
        fail(f"{f}\n{r.describe()}")
    ctx.check_snapshot_tool(snap.path)
    return r, snap


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------

CASES = {}


def case(fn):
    CASES[fn.__name__[len("case_"):]] = fn
    return fn


def basic_case(ctx, name, category=None, exact=True, env=None, foreign_allocs=False):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program(name)
    plain = ctx.run([prog], preload=False, env=env)
    expect_ok(plain, f"{name} without memtrace")
    r, snap = traced_and_checked(ctx, [prog], exact=exact, category=category, env=env,
                                 foreign_allocs=foreign_allocs)
    same_story(plain, r, name)
    return r, snap


def wrapped_by_memtrace(r, label):
    sym = r.out.syms.get(label)
    check(sym is not None, f"no SYM line for {label}\n{r.describe()}")
    check(sym[1] == "libmemtrace.so", f"{label} resolved to {sym[2]} in {sym[1]}, expected memtrace's wrapper "
                                      f"(libmemtrace.so)\n{r.describe()}")
    return sym


def from_driver(r, label):
    sym = r.out.syms.get(label)
    check(sym is not None, f"no SYM line for {label}")
    check(sym[1] == "libcuda.so.1", f"{label} resolved into {sym[1]} ({sym[2]}), expected the driver libcuda.so.1")
    return sym


# routes --------------------------------------------------------------------------------------

@case
def case_route_direct(ctx):
    r, snap = basic_case(ctx, "route_direct", category="route_direct")
    ctx.check_snapshot_tool(snap.path, subprocess_run=True)


@case
def case_route_dlsym(ctx):
    r, _ = basic_case(ctx, "route_dlsym", category="route_dlsym")
    wrapped_by_memtrace(r, "cuMemAlloc_v2")
    wrapped_by_memtrace(r, "cuMemFree_v2")
    from_driver(r, "cuInit")
    from_driver(r, "cuDeviceGet")
    legacy = r.out.syms.get("cuMemAlloc_legacy")
    check(legacy is None or legacy[0] == 0 or legacy[1] == "libcuda.so.1",
          f"legacy cuMemAlloc (32-bit ABI) was substituted: {legacy}")


@case
def case_route_getproc(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_getproc")
    plain = ctx.run([prog], preload=False)
    expect_ok(plain, "route_getproc without memtrace")
    r, snap = traced_and_checked(ctx, [prog], category="route_getproc")
    same_story(plain, r, "route_getproc")
    check(plain.out.statuses == r.out.statuses,
          f"lookup statuses differ: without {plain.out.statuses}, with {r.out.statuses}")
    # The resolver itself and its self-lookups.
    wrapped_by_memtrace(r, "dlsym_cuGetProcAddress_v2")
    wrapped_by_memtrace(r, "cuGetProcAddress@11030")
    wrapped_by_memtrace(r, "cuGetProcAddress@12000")
    check(r.out.syms["cuGetProcAddress@11030"][0] != r.out.syms["cuGetProcAddress@12000"][0],
          "the 11030 (4-argument) and 12000 (5-argument) resolvers got the same wrapper")
    # Memory entry points get wrappers; others are the driver's own.
    for label in ("cuMemAlloc", "cuMemFree", "cuMemAllocAsync", "cuMemAllocAsync+ptds", "cuMemFreeAsync",
                  "cuMemFreeAsync+ptds", "cuMemAlloc@gpa11030"):
        wrapped_by_memtrace(r, label)
    for label in ("cuDeviceGet", "cuInit@2000", "cuCtxSetCurrent", "cuStreamSynchronize"):
        from_driver(r, label)
    check(r.out.syms["cuMemAllocAsync"][0] != r.out.syms["cuMemAllocAsync+ptds"][0],
          "cuMemAllocAsync with and without PER_THREAD_DEFAULT_STREAM got the same wrapper "
          f"({r.out.syms['cuMemAllocAsync']})")
    check(plain.out.syms["cuMemAllocAsync"][0] != plain.out.syms["cuMemAllocAsync+ptds"][0],
          "the simulated driver itself returns one pointer for cuMemAllocAsync with and without PTDS")
    for label in ("cuMemAllocAsync+ptds", "cuMemFreeAsync+ptds"):
        name = r.out.syms[label][2]
        check(name == "-" or name.endswith("_ptsz"), f"{label} resolved to {name}, expected a _ptsz wrapper")
    for label in ("cuNoSuchFunction", "cuMemAlloc@99999"):
        if plain.out.syms[label][0] == 0:
            check(r.out.syms[label][0] == 0, f"failed lookup {label} was given a pointer: {r.out.syms[label]}")


@case
def case_route_runtime(ctx):
    ctx.need_sim("libcuda.so.1", "libcudart.so.13")
    r, snap = basic_case(ctx, "route_runtime", category="route_runtime")
    wrapped_by_memtrace(r, "cuMemAlloc@runtime")


@case
def case_route_nccl(ctx):
    ctx.need_sim("libcuda.so.1", "libcudart.so.13", "libnccl.so.2")
    env = {"SIMCUDA_DEVICES": "2"}
    r, snap = basic_case(ctx, "route_nccl", env=env, exact=True, foreign_allocs=True)
    ndev = r.out.counts.get("devices", 0)
    check(ndev == 2, f"the program saw {ndev} devices with SIMCUDA_DEVICES=2")
    check(len(snap.device_traces) >= 2, f"device_traces has {len(snap.device_traces)} lists for 2 devices")
    user = {e[2] for e in r.out.allocs("dev")}
    nccl_allocs = [e for e in snap.actions("alloc") if e.get("category") == "nccl"]
    internal = [e for e in nccl_allocs if e["addr"] not in user]
    check(internal, "no NCCL-internal allocation with category 'nccl' (communicator buffers); alloc entries: "
                    f"{describe_entries(snap.actions('alloc'), 40)}")
    freed = {e["addr"] for e in snap.actions("free_completed")}
    for e in internal:
        check(e["addr"] in freed, f"NCCL-internal buffer {hex(e['addr'])} not freed by ncclCommDestroy")
    for d, t in enumerate(snap.device_traces[:2]):
        check(any(e.get("action") == "alloc" and e.get("category") == "nccl" for e in t),
              f"no 'nccl' allocation on device {d}")
    # The leaked ncclMemAlloc buffer sits on the last device.
    devices = {int(v[0], 16): int(v[1]) for v in r.out.values.get("DEVICE", [])}
    segs = snap.segment_map()
    for addr in r.out.live("dev"):
        check(segs[addr].get("device") == devices.get(addr),
              f"segment {hex(addr)} is on device {segs[addr].get('device')}, the program put it on {devices.get(addr)}")


@case
def case_route_ctypes(ctx):
    ctx.need_preload()
    ctx.need_sim()
    script = os.path.join(ctx.source, "tests", "process", "route_ctypes.py")
    plain = ctx.run([sys.executable, script], preload=False)
    expect_ok(plain, "route_ctypes.py without memtrace")
    r, snap = traced_and_checked(ctx, [sys.executable, script])
    same_story(plain, r, "route_ctypes.py")
    wrapped_by_memtrace(r, "cuMemAlloc_v2")
    from_driver(r, "cuDeviceGet")


# families ------------------------------------------------------------------------------------

@case
def case_fam_linear(ctx):
    r, snap = basic_case(ctx, "fam_linear", category="fam_linear")
    pitches = {v[0]: int(v[1]) for v in r.out.values.get("PITCH", [])}
    check("pitch_p" in pitches, "no PITCH line")


@case
def case_fam_managed(ctx):
    basic_case(ctx, "fam_managed", category="fam_managed")


@case
def case_fam_async(ctx):
    basic_case(ctx, "fam_async", category="fam_async")


def vmm_handles(out):
    sizes = {v[0]: int(v[1]) for v in out.values.get("HANDLE", [])}
    gone = {v[0] for v in out.values.get("HANDLE_GONE", [])}
    return sizes, gone


@case
def case_fam_vmm(ctx):
    r, snap = basic_case(ctx, "fam_vmm", category="fam_vmm")
    check(r.out.values.get("SAME_HANDLE") == [["1"]],
          f"cuMemRetainAllocationHandle returned another handle: {r.out.values.get('SAME_HANDLE')}")
    sizes, gone = vmm_handles(r.out)
    alive = {k: v for k, v in sizes.items() if k not in gone}
    check(set(alive) == {"create_b", "create_c", "create_d"}, f"program bookkeeping: {sizes} gone {gone}")
    leaked = r.out.live("dev")
    check(len(leaked) == 2, f"expected two leaked mappings (b, d2), the program reports {leaked}")
    # Physical memory counts until its last reference: A is gone (retain, release, unmap, release),
    # B (released while mapped), C (never mapped) and D (one of two mappings left) are alive.
    want = (f"VMM physical memory still alive: {len(alive)} handles, "
            f"{human_bytes(sum(alive.values()))} on devices")
    summary = r.summary()
    check(want in summary, f"the summary should say '{want}':\n{summary}")
    want = f"device 0: current {human_bytes(sum(alive.values()))}"
    check(want in summary, f"the summary should say '{want}' (physical memory of live handles):\n{summary}")


def human_bytes(n):
    """format/units.hpp's human_bytes, which the exit summary prints sizes with."""
    if n < 1024:
        return f"{n} B"
    v, units = n / 1024.0, ["KiB", "MiB", "GiB", "TiB", "PiB"]
    u = 0
    while v >= 1024.0 and u < len(units) - 1:
        v /= 1024.0
        u += 1
    return f"{v:.2f} {units[u]}"


@case
def case_fam_host(ctx):
    r, snap = basic_case(ctx, "fam_host", category="fam_host")
    check(len(snap.segments) == 1, f"expected only the device allocation as a segment, got "
                                   f"{[(hex(s['address']), s['total_size']) for s in snap.segments]}")


@case
def case_fam_context(ctx):
    r, snap = basic_case(ctx, "fam_context", category="fam_context")
    # the leak, plus the VMM mapping and the pool allocation that outlived their context
    check(len(r.out.live("dev")) == 3, f"program bookkeeping: {r.out.live('dev')}")


# faults --------------------------------------------------------------------------------------

def fault_family(ctx, name, specs, env=None, need=("libcuda.so.1",)):
    ctx.need_preload()
    ctx.need_sim(*need)
    prog = ctx.program(name)
    base = ctx.run([prog], preload=False, env=env)
    for spec in specs:
        e = dict(env or {})
        e["SIMCUDA_FAIL"] = spec
        plain = ctx.run([prog], preload=False, env=e)
        check(plain.out.rcs != base.out.rcs or plain.rc != base.rc,
              f"SIMCUDA_FAIL={spec}: no call failed in the run without memtrace (fault point not reached?)\n"
              f"{plain.describe()}")
        # Stacks are beside the point here, and symbolizing them is most of a run's time.
        r = ctx.run([prog], env=dict(e, MEMTRACE_STACKS="none"))
        same_story(plain, r, f"{name} with SIMCUDA_FAIL={spec}")
        if plain.rc == 0:
            snap = r.snapshot()
            try:
                check_against_program(snap, r.out, exact=True, stacks=False)
            except Failure as f:
                fail(f"SIMCUDA_FAIL={spec}: {f}\n{r.describe()}")
            ctx.check_snapshot_tool(snap.path)
        newly = [f"{l}={c}" for (l, c) in plain.out.rcs if c != 0 and (l, c) not in base.out.rcs]
        print(f"  {spec}: {len(plain.out.rcs)} calls, same results with and without memtrace "
              f"(failed: {newly}, exit status {plain.rc})")


@case
def case_huge_request(ctx):
    """Requests of 1 << 62 and SIZE_MAX bytes fail as they do without memtrace; their oom entries
    hold sizes PyTorch's viewer can read exactly (at most 2^53 - 1, so the checker, which refuses
    larger integers, accepts the file) and keep the true values as decimal strings in
    'size_exact', which memtrace's own reader uses."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("huge_request")
    plain = ctx.run([prog], preload=False)
    r, snap = traced_and_checked(ctx, [prog])
    same_story(plain, r, "huge_request")
    ooms = snap.actions("oom")
    check(len(ooms) == 2, f"expected 2 oom entries, got {ooms}")
    want = [str(1 << 62), str(2 ** 64 - 1)]
    check([e.get("size_exact") for e in ooms] == want, f"oom entries: {ooms}")
    check(all(e["size"] == 2 ** 53 - 1 for e in ooms), f"oom sizes: {[e['size'] for e in ooms]}")


@case
def case_fault_linear(ctx):
    fault_family(ctx, "fam_linear", ["cuMemAlloc_v2@2", "cuMemAlloc_v2", "cuMemAllocPitch_v2@1",
                                     "cuMemFree_v2=1@1", "cuMemFree_v2=700@2"])


@case
def case_fault_managed(ctx):
    fault_family(ctx, "fam_managed", ["cuMemAllocManaged@2", "cuMemFree_v2=1@2"])


@case
def case_fault_async(ctx):
    fault_family(ctx, "fam_async", ["cuMemAllocAsync@1", "cuMemAllocAsync_ptsz@1", "cuMemAllocFromPoolAsync@1",
                                    "cuMemAllocFromPoolAsync_ptsz@2", "cuMemFreeAsync=1@1",
                                    "cuMemFreeAsync_ptsz=1@1", "cuMemPoolCreate@1"])


@case
def case_fault_vmm(ctx):
    fault_family(ctx, "fam_vmm", ["cuMemCreate@2", "cuMemMap@1", "cuMemSetAccess=1@1",
                                  "cuMemRetainAllocationHandle=1@1", "cuMemUnmap=1@1", "cuMemRelease=1@1",
                                  "cuMemRelease=1@2", "cuMemAddressReserve@3"])


@case
def case_fault_host(ctx):
    fault_family(ctx, "fam_host", ["cuMemAllocHost_v2@2", "cuMemHostAlloc@1", "cuMemHostRegister_v2@1",
                                   "cuMemFreeHost=1@1", "cuMemHostUnregister=1@1"])


@case
def case_fault_context(ctx):
    fault_family(ctx, "fam_context", ["cuCtxDestroy_v2=1@1", "cuDevicePrimaryCtxReset_v2=1@1", "cuCtxCreate_v4@1",
                                     "cuDevicePrimaryCtxRetain=1@2"])


@case
def case_fault_getproc(ctx):
    fault_family(ctx, "route_getproc", ["cuGetProcAddress_v2=1@6", "cuMemAllocAsync_ptsz@1", "cuMemAlloc_v2@1"])


@case
def case_fault_oom(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("fault_oom")
    env = {"SIMCUDA_MEMORY": "4M"}
    plain = ctx.run([prog], preload=False, env=env)
    expect_ok(plain, "fault_oom without memtrace")
    check(len(plain.out.ooms) == 2, f"with SIMCUDA_MEMORY=4M the program saw {len(plain.out.ooms)} out-of-memory "
                                    f"errors, expected 2\n{plain.describe()}")
    r, snap = traced_and_checked(ctx, [prog], env=env)
    same_story(plain, r, "fault_oom")
    ooms = snap.actions("oom")
    check(len(ooms) == 2, f"{len(ooms)} oom entries in the trace, expected 2: {describe_entries(ooms)}")
    for e, want in zip(sorted(ooms, key=lambda e: e["size"]), sorted(r.out.ooms)):
        check(e["size"] >= want, f"oom entry size {e['size']} < request {want}")
        check(0 <= e["device_free"] <= 4 << 20, f"oom device_free {e['device_free']} outside 0..4M")


BAD_VALUES = [("MEMTRACE_STACK_DEPTH", "abc"), ("MEMTRACE_SUMMARY", "maybe"), ("MEMTRACE_STACKS", "bogus"),
              ("MEMTRACE_MAX_ENTRIES", "-5"), ("MEMTRACE_DEBUG", "2x")]


@case
def case_config_bad_values(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    for var, value in BAD_VALUES:
        env = {"MEMTRACE_STACKS": "none", var: value}  # (a bad MEMTRACE_STACKS falls back to native)
        r = ctx.run([prog], env=env)
        expect_ok(r, f"route_direct with {var}={value}")
        warns = r.warnings()
        check(len(warns) == 1, f"{var}={value}: expected exactly one warning line, got {len(warns)}: {warns}\n"
                               f"{r.describe()}")
        check(var in warns[0], f"{var}={value}: the warning does not name the variable: {warns[0]}")
        snap = r.snapshot()
        check_against_program(snap, r.out, exact=True, stacks=(var == "MEMTRACE_STACKS"))
        ctx.check_snapshot_tool(snap.path)
        print(f"  {var}={value}: {warns[0]}")


@case
def case_output_unwritable(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    plain = ctx.run([prog], preload=False)
    # 1. A directory that cannot exist.
    target = "/proc/nonexistent/x.pickle"
    r = ctx.run([prog], output=target)
    same_story(plain, r, f"MEMTRACE_OUTPUT={target}")
    warns = r.problems()
    check(warns, f"no warning for an unwritable MEMTRACE_OUTPUT={target}\n{r.describe()}")
    check(any("/proc/nonexistent" in w for w in warns), f"the warning does not name the path: {warns}")
    check(not os.path.exists(target), f"{target} exists?")
    # 2. A path through a regular file (root can write anywhere, but not below a file).
    d = os.path.join(ctx.tmp, "filedir")
    os.makedirs(d)
    blocker = os.path.join(d, "file")
    with open(blocker, "w") as f:
        f.write("not a directory\n")
    target = os.path.join(blocker, "x.pickle")
    r = ctx.run([prog], output=target)
    same_story(plain, r, f"MEMTRACE_OUTPUT={target}")
    warns = r.problems()
    check(warns, f"no warning for MEMTRACE_OUTPUT={target}\n{r.describe()}")
    check(any(blocker in w for w in warns), f"the warning does not name the path: {warns}")
    check(sorted(os.listdir(d)) == ["file"], f"files left behind: {os.listdir(d)}")
    with open(blocker) as f:
        check(f.read() == "not a directory\n", "the blocking file was changed")
    check(not os.listdir(r.outdir), f"files left in the run directory: {os.listdir(r.outdir)}")
    # 3. A read-only file system path that exists (root cannot write /proc/self either).
    target = "/proc/self/x-%p.pickle"
    r = ctx.run([prog], output=target)
    same_story(plain, r, f"MEMTRACE_OUTPUT={target}")
    check(r.problems(), f"no warning for MEMTRACE_OUTPUT={target}\n{r.describe()}")


@case
def case_output_not_regular(ctx):
    """MEMTRACE_OUTPUT naming a FIFO (or, as root, a device node made for the test): the program
    runs as without memtrace, one warning says the path is not a regular file, and the FIFO or
    device is still there, untouched."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    fifo = os.path.join(ctx.tmp, "out.fifo")
    os.mkfifo(fifo)
    targets = [(fifo, stat.S_ISFIFO, "FIFO")]
    dev = os.path.join(ctx.tmp, "null")
    try:
        os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append((dev, stat.S_ISCHR, "character device"))
    except OSError:
        pass  # not root: the FIFO alone
    for path, still, kind in targets:
        r = ctx.run([prog], output=path)
        expect_ok(r, f"route_direct with MEMTRACE_OUTPUT={path}")
        warns = [w for w in r.problems() if "not a regular file" in w]
        check(len(warns) == 1 and kind in warns[0], f"MEMTRACE_OUTPUT={path}: warnings {r.problems()}")
        check(still(os.lstat(path).st_mode), f"{path} is no longer a {kind}")


@case
def case_summary_pipe_gone(ctx):
    """The program's stderr is a pipe whose reader has gone: the program exits 7 under memtrace
    as without it (the exit summary's write must not raise SIGPIPE), and with MEMTRACE_LOG the
    summary goes to that file instead."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("stderr_games")

    def run_with_dead_pipe(env_extra):
        env = ctx.base_env()
        first = os.environ.get("MEMTRACE_TEST_PRELOAD_FIRST")
        env.update({"LD_LIBRARY_PATH": ctx.sim, "LD_PRELOAD": (first + " " if first else "") + ctx.preload,
                    "MEMTRACE_OUTPUT": os.path.join(ctx.tmp, "pipe-%p.pickle")})
        env.update(env_extra)
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([prog, "pipe"], env=env, stdout=subprocess.PIPE, stderr=w, timeout=20, text=True)
        finally:
            os.close(w)
        return p

    plain = run_with_dead_pipe({"LD_PRELOAD": os.environ.get("MEMTRACE_TEST_PRELOAD_FIRST", "")})
    check(plain.returncode == 7, f"without memtrace the program exits {plain.returncode}")
    p = run_with_dead_pipe({})
    check(p.returncode == 7, f"under memtrace, stderr a broken pipe: exit {p.returncode}, expected 7 "
                             f"(-13 is death by SIGPIPE)\n{p.stdout}")
    log = os.path.join(ctx.tmp, "memtrace.log")
    p = run_with_dead_pipe({"MEMTRACE_LOG": log})
    check(p.returncode == 7, f"with MEMTRACE_LOG: exit {p.returncode}")
    text = open(log).read() if os.path.exists(log) else ""
    check("memtrace: summary" in text, f"MEMTRACE_LOG holds no summary: {text[:400]!r}")


@case
def case_summary_not_in_program_file(ctx):
    """A program that puts its own data file on fd 2 (dup2) gets none of memtrace's lines in it:
    they go to the stderr the process started with."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("stderr_games")
    data = os.path.join(ctx.tmp, "program-data.txt")
    r = ctx.run([prog, "redirect", data])
    check(r.rc == 7, f"exit {r.rc}\n{r.describe()}")
    content = open(data).read()
    check(content == "program data\n", f"the program's file holds more than its data: {content[:600]!r}")
    check("memtrace: summary" in r.stderr, f"the summary did not reach the original stderr\n{r.describe()}")


@case
def case_secure_execution(ctx):
    """memtrace in /etc/ld.so.preload reaches setuid programs: run one as an unprivileged user
    with MEMTRACE_OUTPUT naming a root-only folder and MEMTRACE_LOG a root-only file. In that
    secure-execution process memtrace reads no MEMTRACE_* variable and writes nothing; the program
    runs as without memtrace. Done in a private mount namespace, where /etc is a tmpfs holding only
    ld.so.preload (the machine's own /etc is never touched); needs root, unshare and setpriv."""
    ctx.need_preload()
    ctx.need_sim()
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        raise Skip("needs root, unshare and setpriv")
    prog = os.path.join(ctx.tmp, "secure_alloc")
    shutil.copy(ctx.program("secure_alloc"), prog)
    os.chown(prog, 0, 0)
    os.chmod(prog, 0o4755)
    os.chmod(ctx.tmp, 0o755)
    vault = os.path.join(ctx.tmp, "root-only")
    os.mkdir(vault, 0o700)
    etc = os.path.join(ctx.tmp, "etc")
    os.mkdir(etc)
    with open(os.path.join(etc, "ld.so.preload"), "w") as f:
        f.write(ctx.preload + "\n")
    if os.path.exists("/etc/ld.so.cache"):
        shutil.copy("/etc/ld.so.cache", etc)
    driver = os.path.join(ctx.sim, "libcuda.so.1")
    # The variables are set by `env`, already running as the unprivileged user, so that only the
    # setuid program itself sees them with root's rights (setpriv, started by root, does not).
    out, log = os.path.join(vault, "written-by-nobody.pickle"), os.path.join(vault, "log-by-nobody.txt")
    script = (f"mount --bind {etc} /etc && exec setpriv --reuid=65534 --regid=65534 --clear-groups "
              f"env MEMTRACE_OUTPUT={out} MEMTRACE_LOG={log} MEMTRACE_DEBUG=1 {prog} {driver}")
    env = ctx.base_env()
    p = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    if p.returncode != 0 and ("unshare" in p.stderr or "mount" in p.stderr):
        raise Skip(f"no private mount namespace here: {p.stderr.strip()[:200]}")
    secure = [l.split() for l in p.stdout.splitlines() if l.startswith("SECURE")]
    if not secure or secure[0][1] != "1":
        raise Skip(f"the setuid bit did not take effect here (a nosuid file system?): {p.stdout!r}")
    check(p.returncode == 0 and "RC 0 0 0 0" in p.stdout, f"the program failed: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
    check(os.listdir(vault) == [], f"a secure-execution process wrote where an unprivileged user chose: {os.listdir(vault)}")
    check("memtrace: summary" not in p.stderr and "memtrace: debug" not in p.stderr,
          f"memtrace recorded in a secure-execution process: {p.stderr[:400]}")


def memtrace_said(text):
    """memtrace's own lines in a stream or a log file (the exit summary's indented lines included)."""
    lines, in_summary = [], False
    for l in text.splitlines():
        if l.startswith("memtrace"):
            in_summary = l.startswith("memtrace: summary")
            lines.append(l)
        elif in_summary and l.startswith("  "):
            lines.append(l)
        else:
            in_summary = False
    return lines


def check_log_file(path, pid=None):
    """A MEMTRACE_LOG file: 0600, holding one exit summary, of process `pid` when given."""
    check(os.path.exists(path), f"no log file {path}")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    check(mode == 0o600, f"{path} has mode {oct(mode)}, expected 0o600")
    text = open(path).read()
    summaries = re.findall(r"^memtrace: summary.*\(pid (\d+)\)", text, re.M)
    check(len(summaries) == 1 and (pid is None or summaries == [str(pid)]),
          f"{path}: summaries of pids {summaries}, expected [{pid if pid else 'one'}]:\n{text[:800]}")
    return text


@case
def case_log_template(ctx):
    """MEMTRACE_LOG expands MEMTRACE_OUTPUT's template as the library loads: with %p the parent and
    each forked child (one forked before the parent's first CUDA call, one after) write their own
    file, each 0600 with that process's exit summary, and stderr gets none of it; with %r each rank
    its own. A path that cannot be opened costs one warning on stderr, and the lines stay there."""
    ctx.need_preload()
    ctx.need_sim()
    logs = os.path.join(ctx.tmp, "logs")
    os.makedirs(logs)
    prog = ctx.program("fork_child")
    r = ctx.run([prog], env={"MEMTRACE_LOG": os.path.join(logs, "fork-%p.log")})
    expect_ok(r, "fork_child with MEMTRACE_LOG")
    ppid = int(r.out.values["PID"][0][0])
    cpid = int(ProgramOutput(r.stdout, child=True).values["PID"][0][0])
    lpid = int([l.split()[2] for l in r.stdout.splitlines() if l.startswith("LATE PID")][0])
    files = sorted(os.listdir(logs))
    want = sorted(f"fork-{p}.log" for p in (ppid, cpid, lpid))
    check(files == want, f"log files {files}, expected {want} (parent, early child, late child)")
    for p in (ppid, cpid, lpid):
        check_log_file(os.path.join(logs, f"fork-{p}.log"), p)
    check(not memtrace_said(r.stderr), f"memtrace spoke on stderr with MEMTRACE_LOG set:\n{r.stderr[:800]}")

    prog = ctx.program("route_direct")
    host = socket.gethostname().replace("/", "_")
    for rank in ("0", "1"):
        r = ctx.run([prog], env={"MEMTRACE_LOG": os.path.join(logs, "rank-%r-on-%h.log"), "RANK": rank})
        expect_ok(r, f"route_direct as rank {rank}")
        check_log_file(os.path.join(logs, f"rank-{rank}-on-{host}.log"))
        check(not memtrace_said(r.stderr), f"rank {rank}: memtrace spoke on stderr:\n{r.stderr[:800]}")

    r = ctx.run([prog], env={"MEMTRACE_LOG": "/proc/nonexistent/log-%p.txt"})
    expect_ok(r, "route_direct with an unopenable MEMTRACE_LOG")
    warns = r.warnings()
    named = re.search(r"MEMTRACE_LOG='/proc/nonexistent/log-(\d+)\.txt' \(.*\); writing to stderr", warns[0]) if warns else None
    check(len(warns) == 1 and named, f"expected one warning naming the expanded path, got {warns}\n{r.describe()}")
    check(re.search(rf"^memtrace: summary.*\(pid {named.group(1)}\)", r.stderr, re.M),
          f"the summary (of pid {named.group(1)}) did not stay on stderr\n{r.describe()}")


@case
def case_log_levels(ctx):
    """MEMTRACE_LOG_LEVEL (trace, debug, info, warn, error, off; default info; MEMTRACE_DEBUG=1 is
    debug): debug lines only at debug and below; the exit summary is info, so warn hides it;
    error keeps only a snapshot that could not be written; off silences memtrace entirely, bad
    configuration included; a bad level is one warning and the default. The snapshot is written
    the same whatever the level."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    unwritable = "/proc/nonexistent/x-%p.pickle"

    def run(env, output=None):
        r = ctx.run([prog], env=env, output=output)
        expect_ok(r, f"route_direct with {env}")
        said = memtrace_said(r.stderr)
        return r, said

    def kinds(said):
        k = set()
        for l in said:
            if l.startswith("memtrace: debug:"):
                k.add("debug")
            elif l.startswith("memtrace: warning:"):
                k.add("warn")
            elif l.startswith("memtrace: error:"):
                k.add("error")
            elif l.startswith("memtrace: summary"):
                k.add("summary")
        return k

    # (environment, output, the kinds of line expected)
    rows = [
        ({}, None, {"summary"}),
        ({"MEMTRACE_LOG_LEVEL": "debug"}, None, {"debug", "summary"}),
        ({"MEMTRACE_LOG_LEVEL": "TRACE"}, None, {"debug", "summary"}),
        ({"MEMTRACE_DEBUG": "1"}, None, {"debug", "summary"}),
        ({"MEMTRACE_LOG_LEVEL": "info", "MEMTRACE_DEBUG": "1"}, None, {"summary"}),
        ({"MEMTRACE_LOG_LEVEL": "warn", "MEMTRACE_STACKS": "bogus"}, None, {"warn"}),
        ({"MEMTRACE_LOG_LEVEL": "warn", "MEMTRACE_DEBUG": "1"}, None, set()),
        ({"MEMTRACE_LOG_LEVEL": "error", "MEMTRACE_STACKS": "bogus"}, unwritable, {"error"}),
        ({"MEMTRACE_LOG_LEVEL": "error", "MEMTRACE_STACKS": "bogus"}, None, set()),
        ({"MEMTRACE_LOG_LEVEL": "off", "MEMTRACE_STACKS": "bogus", "MEMTRACE_DEBUG": "1"}, unwritable, set()),
        ({"MEMTRACE_LOG_LEVEL": "loud"}, None, {"warn", "summary"}),
    ]
    for env, output, want in rows:
        r, said = run(env, output)
        got = kinds(said)
        check(got == want, f"{env}: memtrace said {sorted(got)}, expected {sorted(want)}:\n" + "\n".join(said[:20]))
        if env.get("MEMTRACE_LOG_LEVEL") == "off":
            check("memtrace" not in r.stderr, f"MEMTRACE_LOG_LEVEL=off still printed:\n{r.stderr[:800]}")
        if env.get("MEMTRACE_LOG_LEVEL") == "loud":
            warns = r.warnings()
            check(len(warns) == 1 and "MEMTRACE_LOG_LEVEL='loud'" in warns[0] and "using info" in warns[0],
                  f"a bad level: {warns}")
        if output is None:
            snap = r.snapshot()
            check_against_program(snap, r.out, exact=True, stacks=env.get("MEMTRACE_STACKS") != "none")
        print(f"  {env}: {sorted(got) or 'nothing'}")

    # The line `memtrace run` ends a CUDA-less program with is info too.
    r = run_cli(ctx, ["run", "--sim", "--", "/bin/true"], env={"MEMTRACE_LOG_LEVEL": "warn"})
    check(r.rc == 0 and not r.stderr.strip(), f"MEMTRACE_LOG_LEVEL=warn: memtrace run still spoke\n{r.describe()}")


@case
def case_own_spdlog(ctx):
    """A program that links its own spdlog and fmt (Debian's shared libraries), sets spdlog's global
    level to trace and its own pattern: memtrace's copies (header-only, hidden) neither clash with
    them nor take their settings. The program logs as it would alone, memtrace's logger is not in
    its registry, memtrace's one configuration warning comes out in memtrace's form, and no debug
    line of memtrace's appears."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("own_spdlog")
    ldd = shutil.which("ldd")
    if ldd:
        linked = subprocess.run([ldd, prog], stdout=subprocess.PIPE, text=True).stdout
        check("libspdlog" in linked, f"test design: {prog} does not link the shared libspdlog:\n{linked}")
    plain = ctx.run([prog], preload=False)
    expect_ok(plain, "own_spdlog without memtrace")
    r, snap = traced_and_checked(ctx, [prog], env={"MEMTRACE_SYMBOLIZE_THREADS": "many"})
    same_story(plain, r, "own_spdlog")
    for line in ("own info before cuda 1", "own debug after cuda 2", "REGISTRY memtrace 0"):
        check(line in r.stdout.splitlines(), f"'{line}' missing from the program's output\n{r.describe()}")
    warns = r.warnings()
    check(len(warns) == 1 and "MEMTRACE_SYMBOLIZE_THREADS='many'" in warns[0],
          f"expected memtrace's one warning, got {warns}\n{r.describe()}")
    check("memtrace: debug" not in r.stderr, f"the program's spdlog level reached memtrace's logger\n{r.describe()}")
    check(re.search(r"^memtrace: summary", r.stderr, re.M), f"no exit summary\n{r.describe()}")


@case
def case_summary_off(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    on = ctx.run([prog])
    expect_ok(on)
    check(on.memtrace_lines(), f"no summary on stderr by default\n{on.describe()}")
    off = ctx.run([prog], env={"MEMTRACE_SUMMARY": "0"})
    expect_ok(off)
    check("memtrace" not in off.stderr, f"MEMTRACE_SUMMARY=0 still printed:\n{off.stderr}")
    snap = off.snapshot()
    check_against_program(snap, off.out)
    ctx.check_snapshot_tool(snap.path)


@case
def case_free_stacks(ctx):
    """Free entries carry the allocation's stack by default (PyTorch's context='alloc'), and the
    free call's own stack with MEMTRACE_FREE_STACKS=1."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("fam_linear")

    def first_names(snap, action):
        return {e["addr"]: (e.get("frames") or [{}])[0].get("name", "") for e in snap.actions(action)}

    for env, expect in (({}, {"mt_mem_alloc", "pitched"}), ({"MEMTRACE_FREE_STACKS": "1"}, {"mt_mem_free"})):
        r = ctx.run([prog], env=env)
        expect_ok(r)
        snap = r.snapshot()
        frees = first_names(snap, "free_requested")
        check(len(frees) == 3, f"{env}: expected 3 freed addresses, got {frees}")
        for addr, name in frees.items():
            check(name in expect, f"{env}: free of {hex(addr)} starts in {name!r}, expected one of {expect}")
        ctx.check_snapshot_tool(snap.path)


@case
def case_stack_paths(ctx):
    """Allocations from two known call paths show those functions, files and lines, and none of
    memtrace's own frames - decided by what the frames are (memtrace's module, its source folders,
    its namespace), not by a word in a path: the program is also run from a copy in a folder named
    like a CI checkout ('memtrace-ci.XXXX'), where every path holds the word."""
    ctx.need_preload()
    ctx.need_sim()
    own = os.path.realpath(ctx.preload)
    own_sources = tuple(os.path.join(ctx.source, d) + os.sep for d in ("preload", "unwind", "core", "output"))

    def memtrace_frame(f):
        fn = f["filename"]
        return (os.path.realpath(fn) == own if fn.startswith("/") else False) or fn.startswith(own_sources) \
            or f["name"].startswith("memtrace::")

    ci_dir = tempfile.mkdtemp(prefix="memtrace-ci.", dir=ctx.tmp)
    copy = os.path.join(ci_dir, "stack_paths")
    shutil.copy(ctx.program("stack_paths"), copy)
    for prog in (ctx.program("stack_paths"), copy):
        r, snap = traced_and_checked(ctx, [prog], category="stack_paths")
        paths = [l.split() for l in r.stdout.splitlines() if l.startswith("PATH ")]
        check(len(paths) == 2, f"program printed {paths}")
        allocs = {e["addr"]: e for e in snap.actions("alloc")}
        for _, name, addr, site, caller, call in paths:
            e = allocs.get(int(addr, 16))
            check(e is not None, f"no alloc entry for path {name} at {addr}")
            frames = e.get("frames") or []
            check(len(frames) >= 3, f"path {name}: frames {frames}")
            want = [("alloc_here", int(site)), (caller, int(call))]
            for (fn, line), f in zip(want, frames[:2]):
                check(f["name"] == fn and f["line"] == line and f["filename"].endswith("stack_paths.c"),
                      f"path {name}: expected {fn} at stack_paths.c:{line}, got {f}; all frames: {frames[:4]}")
            check(any(f["name"] == "main" for f in frames), f"path {name}: no main frame in {frames}")
            check(not any(memtrace_frame(f) for f in frames), f"{prog}, path {name}: memtrace's own frames in {frames}")


@case
def case_stack_many(ctx):
    """A snapshot whose stacks hold several hundred distinct return addresses is symbolized by
    several threads (MEMTRACE_SYMBOLIZE_THREADS=4, as MEMTRACE_DEBUG reports), with the same
    frames as one thread gives, each naming its function, file and line."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("stack_many")
    got = {}
    for threads in ("4", "1"):
        r, snap = traced_and_checked(ctx, [prog], env={"MEMTRACE_SYMBOLIZE_THREADS": threads,
                                                       "MEMTRACE_DEBUG": "1"})
        m = re.search(r"symbolized (\d+) addresses \((\d+) units or modules\) on (\d+) threads", r.stderr)
        check(m is not None, f"MEMTRACE_SYMBOLIZE_THREADS={threads}: no symbolization line in\n{r.stderr[-2000:]}")
        n, used = int(m.group(1)), int(m.group(3))
        check(n >= 640, f"{n} addresses symbolized; the program has 640 distinct call sites")
        check(used == int(threads), f"MEMTRACE_SYMBOLIZE_THREADS={threads}: {used} threads took part")
        sites = [l.split() for l in r.stdout.splitlines() if l.startswith("SITE ")]
        check(len(sites) == 320, f"program printed {len(sites)} SITE lines")
        allocs = {e["addr"]: e for e in snap.actions("alloc")}
        frames_of = {}
        for _, fn, addr, line in sites:
            e = allocs.get(int(addr, 16))
            check(e is not None, f"no alloc entry for {fn} at {addr}")
            frames = e.get("frames") or []
            check(len(frames) >= 2, f"{fn}: frames {frames}")
            first = frames[0]
            check(first["name"] == fn and first["line"] == int(line) and first["filename"].endswith("stack_many.c"),
                  f"{fn}: expected {fn} at stack_many.c:{line}, got {first}")
            check(frames[1]["name"] == "main", f"{fn}: called from {frames[1]}")
            frames_of[fn] = [(f["name"], f["filename"], f["line"]) for f in frames]
        got[threads] = frames_of
    differ = [fn for fn in got["1"] if got["1"][fn] != got["4"].get(fn)]
    check(not differ, f"frames differ between 4 threads and 1 for {differ[:5]}: "
          f"{[(got['4'].get(fn), got['1'][fn]) for fn in differ[:2]]}")


@case
def case_stack_table_full(ctx):
    """MEMTRACE_MAX_STACKS=64 and 320 distinct call sites: one warning says the table is full,
    and the allocations after it still have their owner (the program), in the snapshot and in the
    summary, with no 'unknown'."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("stack_many")
    r, snap = traced_and_checked(ctx, [prog], env={"MEMTRACE_MAX_STACKS": "64"})
    warns = [w for w in r.warnings() if "stack table is full" in w]
    check(len(warns) == 1, f"expected one 'stack table is full' warning, got {r.warnings()}")
    cats = [e.get("category") for e in snap.actions("alloc")]
    check(len(cats) >= 320 and set(cats) == {"stack_many"}, f"owners after the table filled: {set(cats)}")
    check("unknown" not in r.summary().split("device memory by owner")[-1].split("largest")[0],
          f"the summary names an unknown owner:\n{r.summary()}")


@case
def case_python_frames(ctx):
    """A Python program allocating through ctypes, with the GIL released (CDLL) and held (PyDLL):
    each allocation's frames show the Python functions, file and lines that led to it, in place
    of the interpreter's own C frames, innermost first. MEMTRACE_PYTHON=off and =gil are obeyed."""
    ctx.need_preload()
    ctx.need_sim()
    script = os.path.join(ctx.source, "tests", "process", "python_frames.py")
    want_py = ["alloc_weights", "Model.build"]

    def py_frames(frames):
        return [f for f in frames if f["filename"].endswith("python_frames.py")]

    for mode, expect in (("auto", {"released", "held"}), ("gil", {"held"}), ("off", set())):
        r, snap = traced_and_checked(ctx, [sys.executable, script], env={"MEMTRACE_PYTHON": mode})
        lines = {v[0]: (int(v[1], 16), int(v[2])) for v in r.out.values.get("PYLINE", [])}
        check(set(lines) == {"released", "held"}, f"program printed PYLINE {lines}")
        allocs = {e["addr"]: e for e in snap.actions("alloc")}
        for label, (addr, line) in lines.items():
            frames = allocs[addr].get("frames") or []
            got = py_frames(frames)
            if label not in expect:
                check(not got, f"MEMTRACE_PYTHON={mode}, {label}: Python frames present: {got}")
                continue
            names = [f["name"] for f in got]
            outer = "load_model_" + label
            check(names[:3] == want_py + [outer] and names[-1] == "<module>",
                  f"MEMTRACE_PYTHON={mode}, {label}: Python frames {names}; all: {frames}")
            check(got[0]["line"] == line,
                  f"MEMTRACE_PYTHON={mode}, {label}: line {got[0]['line']}, expected {line}")
            first_py = frames.index(got[0])
            check(not any(f["name"].startswith("_PyEval_EvalFrame") for f in frames[first_py:]),
                  f"{label}: interpreter frames after the Python ones: {frames}")
            check(all(f["filename"].endswith("python_frames.py") for f in frames[first_py:]),
                  f"{label}: native frames mixed after the Python ones: {frames[first_py:]}")


def interpreter_command(ctx, version):
    """The argv prefix that runs CPython <version> (e.g. "3.13") on this machine, with the
    simulated device on its library path, or raises Skip saying why there is none. 3.11 is the
    interpreter running the tests; 3.12 the machine's own (pyenv or /usr/bin), when it has one;
    3.13 and 3.14 are Debian's packages unpacked under <build>/pythons by scripts/fetch-pythons.sh,
    run through their own loader (they need a newer glibc than the machine's)."""
    if version == "%d.%d" % sys.version_info[:2]:
        return [sys.executable], {}
    root = os.path.join(ctx.build, "pythons", version)
    launch = os.path.join(root, "launch")
    if os.path.isfile(launch):
        with open(launch) as f:
            words = f.read().split("\n")
        words = [w for w in words if w]
        # words: loader, --library-path, <dir>, python
        words[2] = words[2] + ":" + ctx.sim
        return words, {}
    import glob
    import shutil
    for cand in sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")) +
                       glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}")) + \
            [shutil.which(f"python{version}") or ""]:
        if cand and os.access(cand, os.X_OK):
            return [cand], {}
    why = (f"no CPython {version} here: {launch} does not exist (scripts/fetch-pythons.sh fetches 3.13 and "
           f"3.14; see {os.path.join(ctx.build, 'pythons')}) and no python{version} is installed")
    if os.environ.get("MEMTRACE_REQUIRE_PYTHONS") == "1" and version in ("3.13", "3.14"):
        fail(why + " (MEMTRACE_REQUIRE_PYTHONS=1: CI must not skip)")
    raise Skip(why)


def python_scenarios_on(ctx, version):
    """tests/process/python_scenarios.py on one CPython: every allocation's Python frames are
    exactly the ones the interpreter itself reported on the calling line (function, line, file,
    innermost first), with the GIL released and held, in nested functions, a method, a generator,
    a coroutine, a comprehension, a thread, a class body and a callback from C; the owner is the
    script, never 'ffi' or the interpreter; native frames between two eval calls (libc's qsort
    calling back into Python) stay between them; the exit summary says how frames were read and
    that no walk failed."""
    ctx.need_preload()
    ctx.need_sim()
    argv, env = interpreter_command(ctx, version)
    script = os.path.join(ctx.source, "tests", "process", "python_scenarios.py")
    env = dict(env, MEMTRACE_DEBUG="1")
    r, snap = traced_and_checked(ctx, argv + [script], env=env)
    stacks = r.out.values.get("PYSTACK", [])
    labels = {v[0] for v in stacks}
    want_labels = {f"{k}-{g}" for k in ("nested", "method", "generator", "coroutine", "comprehension",
                                          "callback", "thread") for g in ("released", "held")} | {"classbody-released"}
    check(labels == want_labels, f"program printed PYSTACK for {sorted(labels)}\n{r.describe()}")
    allocs = {e["addr"]: e for e in snap.actions("alloc")}
    for v in stacks:
        label, addr = v[0], int(v[1], 16)
        want = [(q, line, f) for q, line, f in json.loads(" ".join(v[2:]))]
        e = allocs.get(addr)
        check(e is not None, f"{version} {label}: no alloc entry at {addr:#x}")
        frames = e.get("frames") or []
        got = [(f["name"], f["line"], f["filename"]) for f in frames if f["filename"].endswith(".py")]
        check(got == want, f"CPython {version}, {label}: Python frames\n  got  {got}\n  want {want}\n"
                           f"  all frames: {[(f['filename'], f['name'], f['line']) for f in frames]}")
        check(e.get("category") == "python_scenarios.py",
              f"CPython {version}, {label}: owner {e.get('category')!r}, expected 'python_scenarios.py'")
        names = [f["name"] for f in frames]
        check(not any(n.startswith("_PyEval_EvalFrame") or n.startswith("PyEval_") for n in names),
              f"CPython {version}, {label}: the interpreter's own frames are still there: {names}")
        if label.startswith("callback"):
            py_at = [i for i, f in enumerate(frames) if f["filename"].endswith(".py")]
            between = [frames[i]["name"] for i in range(py_at[0], py_at[-1]) if not frames[i]["filename"].endswith(".py")]
            check(any("qsort" in n for n in between) or any("libc.so" in frames[i]["filename"]
                                                            for i in range(py_at[0], py_at[-1])),
                  f"CPython {version}, {label}: libc's qsort is not between the two groups of Python frames: {names}")
    summary = r.summary()
    check(re.search(r"python: CPython %s: frames read without the GIL .*; 0 stacks without Python frames"
                    % re.escape(version), summary),
          f"CPython {version}: the summary does not say frames were read without the GIL and no walk failed:\n{summary}")
    categories = {e.get("category") for e in snap.actions("alloc")}
    check(not categories & {"ffi", "python", "_ctypes"} and not any(c.startswith("python3") for c in categories),
          f"CPython {version}: glue named as an owner: {categories}")


@case
def case_python_315_gil_only(ctx):
    """A CPython whose layout memtrace does not know (3.15, Debian's sid) keeps to the C API: the
    allocations made with the GIL held have exactly the interpreter's Python frames, those made
    with it released have none and the owner 'python', and MEMTRACE_DEBUG says why."""
    ctx.need_preload()
    ctx.need_sim()
    argv, env = interpreter_command(ctx, "3.15")
    script = os.path.join(ctx.source, "tests", "process", "python_scenarios.py")
    r, snap = traced_and_checked(ctx, argv + [script], env=dict(env, MEMTRACE_DEBUG="1"))
    check(any("python: CPython 3.15: no layout known for this version; frames from the C API while the GIL is held"
              in l for l in r.memtrace_lines()), f"no debug line naming the fallback:\n{r.describe()}")
    allocs = {e["addr"]: e for e in snap.actions("alloc")}
    stacks = r.out.values.get("PYSTACK", [])
    check(len(stacks) == 15, f"program printed {len(stacks)} PYSTACK lines\n{r.describe()}")
    for v in stacks:
        label, addr = v[0], int(v[1], 16)
        want = [(q, line, f) for q, line, f in json.loads(" ".join(v[2:]))]
        frames = allocs[addr].get("frames") or []
        got = [(f["name"], f["line"], f["filename"]) for f in frames if f["filename"].endswith(".py")]
        if label.endswith("-held"):
            check(got == want, f"3.15, {label}: Python frames\n  got  {got}\n  want {want}")
            check(allocs[addr].get("category") == "python_scenarios.py", f"3.15, {label}: owner {allocs[addr].get('category')!r}")
        else:
            check(got == [], f"3.15, {label}: Python frames without the GIL on an unknown layout: {got}")
            check(allocs[addr].get("category") == "python", f"3.15, {label}: owner {allocs[addr].get('category')!r}")


for _v in ("3.11", "3.12", "3.13", "3.14"):
    def _make(version):
        def run(ctx):
            python_scenarios_on(ctx, version)
        run.__name__ = "case_python_" + version.replace(".", "")
        run.__doc__ = python_scenarios_on.__doc__
        return run
    case(_make(_v))


@case
def case_dlclose_frames(ctx):
    """A plugin allocates and is dlclosed before exit: the snapshot still names its functions,
    file and line (memtrace keeps the module map of everything it saw loaded)."""
    ctx.need_preload()
    ctx.need_sim()
    lib = os.path.join(ctx.bindir, "libdlclose_plugin.so")
    r, snap = traced_and_checked(ctx, [ctx.program("dlclose_main")], env={"DLCLOSE_LIB": lib})
    plugin = r.out.values.get("PLUGIN", [])
    check(len(plugin) == 1, f"program printed PLUGIN {plugin}")
    addr, line, mapped = int(plugin[0][0], 16), int(plugin[0][1]), plugin[0][2]
    check(mapped == "0", "the plugin is still mapped after dlclose: the case proves nothing")
    allocs = {e["addr"]: e for e in snap.actions("alloc")}
    frames = allocs[addr].get("frames") or []
    names = [f["name"] for f in frames]
    check(names[:2] == ["plugin_alloc_site", "plugin_load_weights"] and "main" in names,
          f"frames of the dlclosed plugin's allocation: {frames[:4]}")
    check(frames[0]["filename"].endswith("dlclose_lib.c") and frames[0]["line"] == line,
          f"expected dlclose_lib.c:{line}, got {frames[0]}")


@case
def case_deep_bind(ctx):
    """A library opened with RTLD_DEEPBIND binds cuMemAlloc_v2/cuMemFree_v2 to the driver it links,
    past memtrace. Its first calls are not seen; the program's next cuGetProcAddress (what the
    runtime does) lets memtrace find it: one warning names it, and its later allocations and frees
    are in the snapshot. Bound at load (read-only GOT, -z now -z relro) and lazily (its slots
    resolved only by its first calls, after a first lookup found them unresolved). The program's
    results and exit status are those it has without memtrace."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("deep_bind")
    for variant, env_extra in (("now", {}), ("lazy", {"DEEP_BIND_LAZY": "1"})):
        lib = os.path.join(ctx.bindir, f"libdeep_bind_{variant}.so")
        if not os.path.isfile(lib):
            raise Skip(f"{lib} not built")
        env = dict(env_extra, DEEP_BIND_LIB=lib)
        plain = ctx.run([prog], preload=False, env=env)
        expect_ok(plain, f"deep_bind ({variant}) without memtrace")
        r, snap = traced_and_checked(ctx, [prog], env=env)
        same_story(plain, r, f"deep_bind ({variant})")
        warns = r.warnings()
        named = [w for w in warns if os.path.basename(lib) in w]
        check(len(named) == 1 and len(warns) == 1 and "RTLD_DEEPBIND" in named[0] and "cuMemAlloc_v2" in named[0],
              f"{variant}: expected one warning naming {os.path.basename(lib)} and cuMemAlloc_v2, got {warns}\n"
              f"{r.describe()}")
        segs = snap.segment_map()
        seen = [a for a in r.out.allocs("dev") if a[3] == 5 << 20]
        check(len(seen) == 1 and seen[0][2] in segs and segs[seen[0][2]]["total_size"] == 5 << 20,
              f"{variant}: the library's allocation after the lookup is not in the snapshot with 5 MiB: "
              f"{seen}, segments {[(hex(a), s['total_size']) for a, s in segs.items()]}")
        missed = r.out.values.get("MISSED", [])
        check(len(missed) == 2, f"{variant}: program printed MISSED {missed}")
        check(int(missed[0][0], 16) not in segs,
              f"{variant}: the allocation made before memtrace looked is in the snapshot: the case proves nothing")
        print(f"  {variant}: {named[0]}")


# snapshots on demand --------------------------------------------------------------------------

def check_on_demand(ctx, r, reason_word, at_least):
    extra = r.on_demand_snapshots()
    check(len(extra) >= at_least, f"{len(extra)} on-demand snapshots, expected at least {at_least}: "
                                  f"{r.snapshots()}\n{r.describe()}")
    for path in extra:
        snap = Snapshot(path)
        ctx.check_snapshot_tool(path)
        reason = snap.data.get("allocator_settings", {}).get("memtrace", {}).get("reason")
        check(reason == reason_word, f"{path}: reason {reason!r}, expected {reason_word!r}")
        # A consistent cut: the 3 MiB buffer the program keeps is in every snapshot.
        check(any(s["total_size"] == 3 << 20 for s in snap.segments), f"{path}: the kept 3 MiB buffer is missing")
    check(any(f"{reason_word} snapshot:" in line for line in r.memtrace_lines()),
          f"no '{reason_word} snapshot:' line on stderr\n{r.describe()}")


@case
def case_dump_signal(ctx):
    """SIGUSR2 (the default MEMTRACE_SIGNAL) mid-run, 8 threads allocating: a consistent snapshot,
    and the program runs on to its normal end and exit snapshot."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("dump_signal")
    r = ctx.run([prog, "signal"])
    expect_ok(r)
    check_on_demand(ctx, r, "signal", 1)
    check(not [w for w in r.warnings() if "MEMTRACE_SIGNAL" in w], f"a false warning: {r.warnings()}")
    ctx.check_snapshot_tool(r.snapshot().path)
    # MEMTRACE_SIGNAL=none: the signal is the program's again (its default action ends it).
    r = ctx.run([prog, "signal"], env={"MEMTRACE_SIGNAL": "none"})
    check(r.rc == -12, f"with MEMTRACE_SIGNAL=none SIGUSR2 should end the program (status {r.rc})")
    # Another signal by name, with the SIG prefix: USR2 is then left alone, also ending the program.
    r = ctx.run([prog, "signal"], env={"MEMTRACE_SIGNAL": "SIGUSR1"})
    check(r.rc == -12 and not r.on_demand_snapshots(), f"MEMTRACE_SIGNAL=SIGUSR1 still dumped on USR2\n{r.describe()}")


@case
def case_signal_taken_over(ctx):
    """The program replaces memtrace's SIGUSR2 handler, or blocks SIGUSR2 and sends it: no
    snapshot can follow, and memtrace says why once (from its periodic look or at exit). A run
    that leaves the signal alone gets no such warning."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("signal_taken")
    for mode, words in (("replace", "replaced memtrace's handler"), ("block", "blocks it")):
        plain = ctx.run([prog, mode], preload=False)
        r = ctx.run([prog, mode])
        expect_ok(r)
        same_story(plain, r, f"signal_taken {mode}")
        warns = [w for w in r.warnings() if "MEMTRACE_SIGNAL" in w]
        check(len(warns) == 1 and words in warns[0] and "12" in warns[0],
              f"{mode}: expected one warning saying '{words}', got {r.warnings()}\n{r.describe()}")
        check(not r.on_demand_snapshots(), f"{mode}: a snapshot followed the signal: {r.snapshots()}")
        check(("HANDLED" in r.stdout) == ("HANDLED" in plain.stdout) == (mode == "replace"),
              f"{mode}: the program's own handler must run as without memtrace\n{r.describe()}")
    r = ctx.run([ctx.program("route_direct")])
    expect_ok(r)
    check(not [w for w in r.warnings() if "MEMTRACE_SIGNAL" in w], f"a false warning: {r.warnings()}")


@case
def case_signal_fault_refused(ctx):
    """MEMTRACE_SIGNAL=SEGV (or BUS, FPE, ILL, TRAP, ABRT, SYS, by name or number) is refused with
    one warning that names the variable: a program that faults dies of its fault at once, with
    no snapshot per fault."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("signal_fatal")
    for value in ("SEGV", "11", "SIGBUS", "ABRT"):
        r = ctx.run([prog, "segv"], env={"MEMTRACE_SIGNAL": value})
        check(r.rc == -signal.SIGSEGV, f"MEMTRACE_SIGNAL={value}: exit {r.rc}, expected death by SIGSEGV\n{r.describe()}")
        warns = [w for w in r.warnings() if "MEMTRACE_SIGNAL" in w]
        check(len(warns) == 1 and "fault" in warns[0], f"MEMTRACE_SIGNAL={value}: warnings {r.warnings()}")
        check(len(r.on_demand_snapshots()) == 0, f"MEMTRACE_SIGNAL={value}: snapshots {r.snapshots()}")


@case
def case_signal_term_dumps_then_dies(ctx):
    """MEMTRACE_SIGNAL=TERM on a program with no TERM handler of its own: a snapshot is written,
    then the signal's default action is taken (the program dies by SIGTERM, as without memtrace)."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("signal_fatal")
    plain = ctx.run([prog, "term"], preload=False)
    check(plain.rc == -signal.SIGTERM, f"without memtrace the program exits {plain.rc}")
    r = ctx.run([prog, "term"], env={"MEMTRACE_SIGNAL": "TERM"}, timeout=90)
    check(r.rc == -signal.SIGTERM and "SURVIVED" not in r.stdout,
          f"under memtrace the program exits {r.rc}, expected death by SIGTERM\n{r.describe()}")
    snaps = r.on_demand_snapshots()
    check(len(snaps) == 1, f"expected one signal snapshot, found {r.snapshots()}\n{r.describe()}")
    snap = Snapshot(snaps[0])
    check(snap.data["allocator_settings"]["memtrace"]["reason"] == "signal", "the snapshot's reason is not 'signal'")
    check(any(s["total_size"] == 3 << 20 for s in snap.segments), "the 3 MiB allocation is not in the snapshot")


@case
def case_dump_interval(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("dump_signal")
    # The program runs until two interval snapshots exist: their count must not depend on how fast
    # a loaded machine writes them.
    r = ctx.run([prog, "interval", "until", "2"], env={"MEMTRACE_INTERVAL": "0.15"}, timeout=180)
    expect_ok(r)
    check_on_demand(ctx, r, "interval", 2)
    names = sorted(r.on_demand_snapshots())
    check(len(set(names)) == len(names), "interval snapshots overwrote each other")
    # Interval snapshots of a program that loads nothing more share one symbolizer
    # (unwind/symbolizer_reuse.hpp): the debug line of every snapshot after the first says so.
    r = ctx.run([prog, "interval", "until", "3"], env={"MEMTRACE_INTERVAL": "0.15", "MEMTRACE_LOG_LEVEL": "debug"},
                timeout=180)
    expect_ok(r)
    check_on_demand(ctx, r, "interval", 3)
    symbolized = [l for l in r.memtrace_lines() if "symbolized " in l and " addresses " in l]
    reused = [l for l in symbolized if "(the last dump's symbolizer)" in l]
    check(len(symbolized) >= 4 and len(reused) >= 2,
          f"{len(symbolized)} symbolization lines, {len(reused)} with the last dump's symbolizer\n{r.describe()}")
    # A long run keeps only the last MEMTRACE_INTERVAL_KEEP; an interval under 10 ms is said.
    r = ctx.run([prog, "interval", "2500"], env={"MEMTRACE_INTERVAL": "0.001", "MEMTRACE_INTERVAL_KEEP": "2"},
                timeout=60)
    expect_ok(r)
    warns = [w for w in r.warnings() if "MEMTRACE_INTERVAL" in w and "10 ms" in w]
    check(len(warns) == 1, f"no single warning about the 10 ms clamp: {r.warnings()}")
    written = [l for l in r.memtrace_lines() if "interval snapshot:" in l]
    kept = r.on_demand_snapshots()
    check(len(written) > 2 and len(kept) == 2, f"{len(written)} interval snapshots written, {len(kept)} kept "
                                                f"(MEMTRACE_INTERVAL_KEEP=2)\n{r.describe()}")


@case
def case_dump_oom(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("fault_oom")
    r = ctx.run([prog], env={"SIMCUDA_MEMORY": "4M"})
    expect_ok(r)
    extra = r.on_demand_snapshots()
    check(1 <= len(extra) <= 2, f"{len(extra)} out-of-memory snapshots for 2 out-of-memory errors: {r.snapshots()}")
    for path in extra:
        snap = Snapshot(path)
        ctx.check_snapshot_tool(path)
        check(snap.actions("oom"), f"{path}: an out-of-memory snapshot without an oom entry")
        check(snap.data["allocator_settings"]["memtrace"]["reason"] == "oom", f"{path}: reason is not 'oom'")
    r = ctx.run([prog], env={"SIMCUDA_MEMORY": "4M", "MEMTRACE_DUMP_ON_OOM": "0"})
    expect_ok(r)
    check(not r.on_demand_snapshots(), f"MEMTRACE_DUMP_ON_OOM=0 still dumped: {r.snapshots()}")


@case
def case_dropped_history(ctx):
    """A ring far smaller than the history: the snapshot still satisfies the viewer's rules and
    still holds every live allocation."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("dump_signal")
    r = ctx.run([prog, "interval"], env={"MEMTRACE_MAX_ENTRIES": "50"})
    expect_ok(r)
    snap = r.snapshot()
    meta = snap.data["allocator_settings"]["memtrace"]
    check(meta["entries_dropped"] > 0, f"nothing was dropped: {meta}")
    lists = [len(t) for t in snap.data["device_traces"]]
    check(max(lists) <= 50, f"device lists of {lists} entries with MEMTRACE_MAX_ENTRIES=50 (the bound is exact)")
    check(any(s["total_size"] == 3 << 20 for s in snap.segments), "the kept 3 MiB buffer is missing")
    ctx.check_snapshot_tool(snap.path)


@case
def case_rank_filter(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    r = ctx.run([prog], env={"RANK": "3", "MEMTRACE_RANKS": "0,2"})
    expect_ok(r)
    check(not r.snapshots() and not r.memtrace_lines(), f"rank 3 recorded with MEMTRACE_RANKS=0,2\n{r.describe()}")
    r = ctx.run([prog], env={"RANK": "2", "MEMTRACE_RANKS": "0,2", "MEMTRACE_OUTPUT": None})
    expect_ok(r)
    r = ctx.run([prog], env={"SLURM_PROCID": "2", "MEMTRACE_RANKS": "0, 2"})
    expect_ok(r)
    check_against_program(r.snapshot(), r.out)
    # No rank at all: not recorded, and said once (silence would look like memtrace failing).
    r = ctx.run([prog], env={"MEMTRACE_RANKS": "0"})
    expect_ok(r)
    warns = [w for w in r.warnings() if "MEMTRACE_RANKS" in w and "no rank" in w]
    check(not r.snapshots() and len(warns) == 1 and len(r.memtrace_lines()) == 1,
          f"a process with no rank under MEMTRACE_RANKS=0: {r.memtrace_lines()}\n{r.describe()}")


# threads -------------------------------------------------------------------------------------

@case
def case_exit_frees(ctx):
    """The exit snapshot comes after the program's own exit-time frees (an atexit handler
    registered before the first CUDA call frees 48 MiB) and before the runtime's teardown
    (cudaDeviceReset called by the C library's exit code): it shows exactly the 1 MiB leaked."""
    ctx.need_preload()
    ctx.need_sim("libcuda.so.1", "libcudart.so.13")
    prog = ctx.program("exit_frees")
    r = ctx.run([prog])
    expect_ok(r, "exit_frees")
    check(r.out.values.get("EXITFREE") == [["0"]], f"the exit-time free failed: {r.out.values.get('EXITFREE')}")
    buffer = int(r.out.values["BUFFER"][0][0], 16)
    leaked = int(r.out.values["LEAKED"][0][0], 16)
    snap = r.snapshot()
    live = {s["address"]: s["total_size"] for s in snap.segments}
    check(buffer not in live, f"the 48 MiB freed by an exit handler is reported live: {live}")
    check(live.get(leaked) == 1 << 20, f"the leaked 1 MiB is not live in the exit snapshot: {live}")
    check(sum(live.values()) == 1 << 20, f"live at exit: {live}")
    ctx.check_snapshot_tool(snap.path)


@case
def case_thread_stress(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("thread_stress")
    r = ctx.run([prog])
    expect_ok(r, "thread_stress")
    snap = r.snapshot()
    n_alloc, n_free = r.out.counts["alloc"], r.out.counts["free"]
    check(n_alloc == 3000 and n_free == 3000, f"program counts: {r.out.counts}")
    counts = {a: len(snap.actions(a)) for a in ("alloc", "segment_alloc", "free_requested", "free_completed",
                                                 "segment_free")}
    want = {"alloc": n_alloc, "segment_alloc": n_alloc, "free_requested": n_free, "free_completed": n_free,
            "segment_free": n_free}
    check(counts == want, f"trace counts {counts}, expected {want}")
    check(not snap.segments, f"{len(snap.segments)} segments left, the program freed everything")
    check_entry_fields(snap)
    ctx.check_snapshot_tool(snap.path)


@case
def case_nvtx_ranges(ctx):
    """NVTX ranges reach every allocation through NVTX's injection (docs/ranges.md)."""
    r, snap = basic_case(ctx, "nvtx_ranges", category="nvtx_ranges")
    check(r.out.values.get("LEVELS") == [["0", "1", "1", "0"]],
          f"push/pop levels memtrace handed back: {r.out.values.get('LEVELS')}, expected 0 1 1 0")
    want = {}
    for words in r.out.values.get("RANGES", []):
        path = " ".join(words[1:])
        want[int(words[0], 16)] = [] if path == "-" else path.split(" > ")
    check(len(want) == 11, f"the program printed {len(want)} distinct RANGES lines")
    entries = [e for _, e in snap.entries()]
    for addr, names in want.items():
        mine = [e for e in entries if e.get("addr") == addr and e["action"] in ("alloc", "segment_alloc",
                                                                               "free_requested", "free_completed")]
        check(mine, f"no entries at {addr:#x}")
        for e in mine:
            check(e.get("ranges", []) == names,
                  f"{e['action']} at {addr:#x}: ranges {e.get('ranges')}, expected {names}")
            if names:
                check(e["user_metadata"] == " > ".join(names),
                      f"{e['action']} at {addr:#x}: user_metadata {e['user_metadata']!r}")
            else:
                check("ranges" not in e, f"{e['action']} at {addr:#x} carries 'ranges' outside every range")
    blocks = {b["address"]: b for seg in snap.segments for b in seg["blocks"]}
    live = r.out.live("dev")
    check(len(live) == 10, f"{len(live)} allocations live at the end, expected 10")
    for addr in live:
        b = blocks.get(addr)
        check(b is not None, f"no block at {addr:#x}")
        check(b.get("ranges", []) == want[addr], f"block {addr:#x}: ranges {b.get('ranges')}, expected {want[addr]}")
    marks = [e for e in entries if e["action"] == "annotate"]
    check(len(marks) == 1 and marks[0]["user_metadata"] == "checkpoint" and marks[0].get("ranges") == ["step7"]
          and marks[0]["addr"] == 0 and marks[0]["size"] == 0,
          f"markers: {marks}")
    ann = snap.data["external_annotations"]
    check(all(set(a) == {"name", "stage", "device", "time_us"} and a["stage"] in ("START", "END") and a["device"] == 0
              for a in ann), f"external_annotations not in PyTorch's shape: {ann[:4]}")
    names = {}
    for a in ann:
        names.setdefault(a["name"], []).append((a["stage"], a["time_us"]))
    for n in ("outer", "inner", "mydomain:layer1", "wide\u2713", "a", "mydomain:x", "step7", "worker0", "worker1"):
        got = names.get(n)
        check(got is not None and [g[0] for g in got] == ["START", "END"] and got[0][1] <= got[1][1],
              f"external_annotations for {n!r}: {got}")
    check(sorted(a["time_us"] for a in ann) == [a["time_us"] for a in ann], "external_annotations out of time order")

    # MEMTRACE_NVTX=0: NVTX left alone, nothing recorded.
    off = ctx.run([ctx.program("nvtx_ranges")], env={"MEMTRACE_NVTX": "0"})
    expect_ok(off, "nvtx_ranges with MEMTRACE_NVTX=0")
    s_off = off.snapshot()
    check(not any("ranges" in e for _, e in s_off.entries()) and s_off.data["external_annotations"] == [],
          "MEMTRACE_NVTX=0 still recorded ranges")
    # Another tool named already: memtrace says so once and leaves it (NVTX then finds no tool).
    other = os.path.join(ctx.tmp, "libother_tool.so")
    mine = ctx.run([ctx.program("nvtx_ranges")], env={"NVTX_INJECTION64_PATH": other})
    expect_ok(mine, "nvtx_ranges with another NVTX tool named")
    check(mine.stderr.count("NVTX_INJECTION64_PATH already names another tool") == 1,
          f"expected one line about the other tool:\n{mine.stderr}")
    check(not any("ranges" in e for _, e in mine.snapshot().entries()), "ranges recorded although another tool was named")


@case
def case_nvtx_marker_flood(ctx):
    """Markers with ever new texts fill their own store, never the range names (docs/ranges.md)."""
    n = 70000  # past the marker store's 65,536 texts
    r = ctx.run([ctx.program("nvtx_ranges")], env={"MT_MARKER_FLOOD": str(n), "MEMTRACE_MAX_ENTRIES": "200000"})
    expect_ok(r, "nvtx_ranges with a marker flood")
    snap = r.snapshot()
    entries = [e for _, e in snap.entries()]
    marks = [e["user_metadata"] for e in entries if e["action"] == "annotate"]
    check(len(marks) == n, f"{len(marks)} annotate entries, expected {n}")
    full = "(marker text dropped: memtrace's marker store is full)"
    named = [m for m in marks if m != full]
    check(named == [f"step {i}" for i in range(len(named))] and len(named) >= 65000,
          f"{len(named)} markers kept their text, in order; expected the first 65,000 or more")
    check(all(m == full for m in marks[len(named):]) and len(named) < n,
          f"markers past the store's bound: {set(marks[len(named):])}")
    (addr, _), = r.out.live("dev").items()
    mine = [e for e in entries if e.get("addr") == addr and e["action"] == "alloc"]
    check(len(mine) == 1 and mine[0].get("ranges") == ["after_flood"],
          f"the allocation after the flood: {mine}")


@case
def case_thread_exit(ctx):
    ctx.need_preload()
    ctx.need_sim()
    r, snap = traced_and_checked(ctx, [ctx.program("thread_exit")], category="thread_exit")
    check(len(snap.segments) == 3, f"expected 3 segments, got {len(snap.segments)}")


@case
def case_fork_child(ctx):
    """A child forked before the parent initialised CUDA records and writes its own snapshot,
    holding only its own allocations; in caching mode it starts with no allocator (the parent's
    segments are not its own). A child forked after the parent allocated gets the driver's refusal
    exactly as without memtrace, and its snapshot holds none of the parent's memory."""
    ctx.need_preload()
    ctx.need_sim()
    for mode in ("passthrough", "caching"):
        fork_child_once(ctx, mode)


def fork_child_once(ctx, mode):
    prog = ctx.program("fork_child")
    outdir = os.path.join(ctx.tmp, "fork-" + mode)
    os.makedirs(outdir)
    plain = ctx.run([prog], preload=False)
    r = ctx.run([prog], output=os.path.join(outdir, "mt-%p.pickle"), env={"MEMTRACE_ALLOCATOR": mode})
    expect_ok(r, f"fork_child ({mode})")
    late = [l for l in r.stdout.splitlines() if l.startswith("LATE ") and not l.startswith("LATE PID")]
    plain_late = [l for l in plain.stdout.splitlines() if l.startswith("LATE ") and not l.startswith("LATE PID")]
    check(late == plain_late and "LATE RC late_alloc 3" in late,
          f"the late child: {late} with memtrace, {plain_late} without\n{r.describe()}")
    check(r.out.values.get("LATE_STATUS") == [["0"]], f"late child status {r.out.values.get('LATE_STATUS')}")
    lpid = int([l.split()[2] for l in r.stdout.splitlines() if l.startswith("LATE PID")][0])
    child = ProgramOutput(r.stdout, child=True)
    check(child.done, f"the child did not finish\n{r.describe()}")
    check(r.out.values.get("CHILD_STATUS") == [["0"]], f"child status {r.out.values.get('CHILD_STATUS')}")
    ppid = int(r.out.values["PID"][0][0])
    cpid = int(child.values["PID"][0][0])
    files = sorted(os.listdir(outdir))
    check(files == sorted([f"mt-{ppid}.pickle", f"mt-{cpid}.pickle", f"mt-{lpid}.pickle"]),
          f"snapshots {files}, expected one for the parent ({ppid}) and one for each child ({cpid}, {lpid})")
    late_snap = Snapshot(os.path.join(outdir, f"mt-{lpid}.pickle"))
    check(not late_snap.segments and not late_snap.actions("alloc"),
          f"the late child's snapshot shows memory it never had: {late_snap.segments}")
    parent_snap = Snapshot(os.path.join(outdir, f"mt-{ppid}.pickle"))
    child_snap = Snapshot(os.path.join(outdir, f"mt-{cpid}.pickle"))
    for who, snap, out in (("parent", parent_snap, r.out), ("child", child_snap, child)):
        try:
            if mode == "caching":
                check_caching_snapshot(snap, out)
                # Every block the process allocated lies in a segment its own trace created.
                made = [(e["addr"], e["addr"] + e["size"]) for e in snap.actions("segment_alloc")]
                for e in snap.actions("alloc"):
                    check(any(lo <= e["addr"] < hi for lo, hi in made),
                          f"alloc at {hex(e['addr'])} lies in no segment this process allocated")
            else:
                check_against_program(snap, out, exact=True, category="fork_child")
        except Failure as f:
            fail(f"{mode}: {who}'s snapshot: {f}\n{r.describe()}")
        ctx.check_snapshot_tool(snap.path)
    child_sizes = {e[3] for e in child.allocs("dev")}
    parent_sizes = {e[3] for e in r.out.allocs("dev")}
    check(not child_sizes & parent_sizes, "test design: parent and child sizes overlap")
    got = {e["size"] for e in child_snap.actions("alloc")}
    check(got <= child_sizes, f"the child's snapshot has allocations of sizes {got - child_sizes} it did not make")
    got = {e["size"] for e in parent_snap.actions("alloc")}
    check(got <= parent_sizes, f"the parent's snapshot has allocations of sizes {got - parent_sizes} it did not make")


# glue ----------------------------------------------------------------------------------------

@case
def case_glue_dlsym(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("glue_dlsym")
    plain = ctx.run([prog], preload=False)
    expect_ok(plain, "glue_dlsym without memtrace")
    r = ctx.run([prog])
    expect_ok(r, "glue_dlsym")
    ours = {"h:cuMemAlloc_v2", "h:cuMemCreate", "h:cuGetProcAddress", "h:cuGetProcAddress_v2"}
    for label, (ptr, module, name) in plain.out.syms.items():
        got = r.out.syms.get(label)
        check(got is not None, f"no SYM {label} with memtrace")
        if label in ours:
            check(got[1] == "libmemtrace.so", f"dlsym {label} with memtrace: {got[2]} in {got[1]}, "
                                              f"expected memtrace's wrapper")
        else:
            check((got[0] == 0) == (ptr == 0) and got[1:] == (module, name),
                  f"dlsym {label}: without memtrace {module}:{name} ({hex(ptr)}), with memtrace "
                  f"{got[1]}:{got[2]} ({hex(got[0])})")
    check(r.out.syms["RTLD_DEFAULT:cudnnCreate"][0] == 0, "dlsym(RTLD_DEFAULT, cudnnCreate) is not NULL")
    check(r.out.syms["RTLD_NEXT:malloc"][1].startswith("libc"), f"RTLD_NEXT malloc: {r.out.syms['RTLD_NEXT:malloc']}")
    check(r.out.syms["h:cuMemAlloc"][1] == "libcuda.so.1",
          f"legacy cuMemAlloc must stay the driver's: {r.out.syms['h:cuMemAlloc']}")


def run_behind_chain(ctx, program, chain_lib):
    """Runs a test program with a second preload library alone, then behind libmemtrace.so; the
    run alone must succeed. Returns both results."""
    prog = ctx.program(program)
    chain = os.path.join(ctx.bindir, chain_lib)
    if not os.path.isfile(chain):
        raise Skip(f"{chain} not built")
    alone = ctx.run([prog], preload=chain)
    expect_ok(alone, f"{program} with {chain_lib} alone")
    return alone, ctx.run([prog], preload=f"{ctx.preload} {chain}")


@case
def case_glue_chain(ctx):
    ctx.need_preload()
    ctx.need_sim()
    alone, r = run_behind_chain(ctx, "glue_chain", "libchain.so")
    expect_ok(r, "glue_chain with libmemtrace.so then libchain.so")
    chain_lines = lambda res: {v[0]: v[1] for v in res.out.values.get("CHAIN", [])}  # noqa: E731
    got = chain_lines(r)
    check(got.get("next_puts", "").startswith("libc"), f"libchain's dlsym(RTLD_NEXT, puts) found {got}")
    check(got.get("next_malloc", "").startswith("libc"), f"libchain's dlsym(RTLD_NEXT, malloc) found {got}")
    check(int(got.get("calls", "0")) >= 1, f"libchain's puts was not called: {got}")
    check(got == chain_lines(alone), f"libchain sees {got} behind memtrace, {chain_lines(alone)} alone")
    check("hello through the chain" in r.stdout, "puts output missing")


@case
def case_glue_chain_cuda(ctx):
    """A second interposer after memtrace that wraps the driver's cuMemAlloc_v2/cuMemFree_v2 and
    calls on with dlsym(RTLD_NEXT): its lookup reaches the driver (not memtrace's wrapper, which
    would forward back to it forever), every call goes through both once, and memtrace records
    each allocation once."""
    ctx.need_preload()
    ctx.need_sim()
    alone, r = run_behind_chain(ctx, "glue_chain_cuda", "libchaincuda.so")
    check(r.rc == 0 and "CHAIN_LOOP" not in r.stdout, f"the program did not survive the chain:\n{r.describe()}")
    expect_ok(r, "glue_chain_cuda with libmemtrace.so then libchaincuda.so")
    got = {v[0]: v[1] for v in r.out.values.get("CHAIN", [])}
    check(got.get("next_alloc", "").startswith("libcuda"), f"libchaincuda's dlsym(RTLD_NEXT) found {got}")
    check(got.get("allocs") == "2" and got.get("frees") == "1", f"libchaincuda saw {got}, expected 2 allocs, 1 free")
    snap = r.snapshot()
    try:
        check_against_program(snap, r.out)
    except Failure as f:
        fail(f"{f}\n{r.describe()}")


@case
def case_glue_probe(ctx):
    """dlsym(RTLD_DEFAULT, name) as a feature probe sees what the driver has, not memtrace's
    exports: before any driver is loaded the driver's names are missing, as without memtrace;
    once the program loads one globally they are found."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("glue_probe")
    plain = ctx.run([prog], preload=False)
    expect_ok(plain)
    r = ctx.run([prog])
    expect_ok(r)
    probes = lambda res: {(v[0], v[1]): v[2] for v in res.out.values.get("PROBE", [])}  # noqa: E731
    want = {("before", "cuMemAlloc_v2"): "absent", ("before", "cuIpcGetMemHandle"): "absent",
            ("after", "cuMemAlloc_v2"): "present", ("after", "cuIpcGetMemHandle"): "present"}
    check(probes(plain) == want, f"without memtrace: {probes(plain)}")
    check(probes(r) == want, f"under memtrace the probes say {probes(r)}, without it {probes(plain)}")


@case
def case_glue_unknown_free(ctx):
    r, snap = basic_case(ctx, "glue_unknown_free", category="glue_unknown_free")
    a = r.out.frees("dev")[0][2]
    n = sum(1 for e in snap.actions("free_completed") if e["addr"] == a)
    check(n == 1, f"{hex(a)} freed once and then again (failing): {n} free_completed entries")


# InitializeInjectionNvtx2: NVTX's injection entry point (docs/ranges.md).
ALLOWED_EXPORT = re.compile(r"^(cu[A-Z][A-Za-z0-9_]*|nccl[A-Z][A-Za-z0-9_]*|dlsym|memtrace_[A-Za-z0-9_]+|InitializeInjectionNvtx2)$")
REQUIRED_EXPORTS = ["dlsym", "cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2",
                    "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
                    "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemCreate", "cuMemMap", "cuMemUnmap",
                    "cuMemRelease", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost",
                    "cuMemHostRegister_v2", "cuMemHostUnregister", "cuCtxDestroy_v2", "ncclMemAlloc", "ncclMemFree",
                    "cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuIpcGetMemHandle",
                    "memtrace_malloc", "memtrace_free"]
FORBIDDEN_EXPORTS = ["cuMemAlloc", "cuMemFree", "cuMemAllocPitch", "cuMemAllocHost", "cuMemGetInfo", "cuInit",
                     "cuDeviceTotalMem", "cuCtxCreate", "cuMemHostRegister"]


@case
def case_export_list(ctx):
    ctx.need_preload()
    nm = shutil.which("nm")
    if not nm:
        raise Skip("nm not found")
    p = subprocess.run([nm, "-D", "--defined-only", ctx.preload], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    check(p.returncode == 0, f"nm failed: {p.stderr}")
    names = []
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 3:
            names.append(f[2].split("@")[0])
    bad = [n for n in names if not ALLOWED_EXPORT.match(n)]
    check(not bad, f"libmemtrace.so exports names outside cu*/nccl*/dlsym/memtrace_*/NVTX's entry point: {bad}")
    check(not [n for n in names if n.startswith("cuda")], "libmemtrace.so exports runtime (cuda*) names")
    missing = [n for n in REQUIRED_EXPORTS if n not in names]
    check(not missing, f"libmemtrace.so does not export {missing}")
    forbidden = [n for n in FORBIDDEN_EXPORTS if n in names]
    check(not forbidden, f"libmemtrace.so exports legacy/unhooked driver names {forbidden}")
    # memtrace's spdlog and fmt (header-only, hidden) must never meet a program's own copies.
    clash = [n for n in names if "spdlog" in n or "3fmt" in n or n.startswith("fmt")]
    check(not clash, f"libmemtrace.so exports spdlog/fmt symbols: {clash[:10]}")
    readelf = shutil.which("readelf")
    if readelf:
        p = subprocess.run([readelf, "--dyn-syms", "-W", ctx.preload], stdout=subprocess.PIPE, text=True)
        unique = [l.split()[-1] for l in p.stdout.splitlines() if " UNIQUE " in l]
        check(not unique, f"libmemtrace.so has GNU unique symbols (shared with every other object): {unique[:10]}")
    print(f"  {len(names)} exported names, all allowed")


# the public API -------------------------------------------------------------------------------

# memtrace_status (include/memtrace/memtrace.h); the Python module has the same numbers.
API_OK, API_NOT_LOADED, API_NOT_RECORDING, API_INVALID, API_NO_OPEN_RANGE, API_WRITE_FAILED = 0, 1, 2, 3, 4, 5


def ranges_pending():
    """True while this branch carries a stand-in for preload/ranges.cpp that records no ranges
    (its tests/CMakeLists.txt then sets MEMTRACE_TEST_RANGES_PENDING=1): the checks of what ranges
    put into a snapshot are left out, and say so."""
    return os.environ.get("MEMTRACE_TEST_RANGES_PENDING") == "1"


def labelled(r):
    """label -> address, from the programs' LABEL lines."""
    return {v[0]: int(v[1], 16) for v in r.out.values.get("LABEL", [])}


def stat_values(r):
    return {v[0]: int(v[1]) for v in r.out.values.get("STAT", []) if len(v) == 2 and re.match(r"^-?\d+$", v[1])}


def dumped(r):
    return {v[0]: " ".join(v[1:]) for v in r.out.values.get("DUMPED", [])}


def check_api_ranges(snap, r, expect, marker):
    """Each labelled allocation's alloc entry carries exactly the ranges in `expect` (outermost
    first; [] for none), and an 'annotate' entry carries `marker` (docs/ranges.md)."""
    if ranges_pending():
        print(f"  {os.path.basename(snap.path)}: range checks left out (MEMTRACE_TEST_RANGES_PENDING=1)")
        return
    where = labelled(r)
    allocs = {e["addr"]: e for e in snap.actions("alloc")}
    for label, want in expect.items():
        e = allocs.get(where.get(label))
        check(e is not None, f"{snap.path}: no alloc entry for {label} ({where.get(label)})")
        check(e.get("ranges", []) == want,
              f"{snap.path}: {label} has ranges {e.get('ranges')}, expected {want}: {describe_entries([e])}")
    marks = [e for e in snap.actions("annotate") if e.get("user_metadata") == marker]
    check(len(marks) == 1, f"{snap.path}: {len(marks)} annotate entries with {marker!r}: "
                           f"{describe_entries(snap.actions('annotate'))}")


def check_api_snapshot(ctx, path, r, live_labels):
    """A snapshot the program asked for: at its path, valid, taken for the API, holding what was live."""
    check(os.path.isfile(path), f"no snapshot at {path!r}: {os.listdir(os.path.dirname(path))}\n{r.describe()}")
    snap = Snapshot(path)
    reason = snap.data.get("allocator_settings", {}).get("memtrace", {}).get("reason")
    check(reason == "api", f"{path}: reason {reason!r}, expected 'api'")
    where = labelled(r)
    want = {where[l] for l in live_labels}
    check(set(snap.segment_map()) == want, f"{path}: segments {[hex(a) for a in snap.segment_map()]}, "
                                           f"live then: {[hex(a) for a in want]}")
    ctx.check_snapshot_tool(path)
    return snap


@case
def case_api_c(ctx):
    """The C API (libmemtrace_api.a) in a program without memtrace, with it, and with memtrace
    loaded but not recording: statuses, errno kept, ranges on allocations, memory numbers, dumps
    to an explicit path, to the configured name and to a path that cannot be written."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("api_client")
    explicit = os.path.join(ctx.tmp, "asked for %p.pickle")  # '%' is the program's, not a template's
    blocker = os.path.join(ctx.tmp, "a-file")
    open(blocker, "w").close()
    unwritable = os.path.join(blocker, "x.pickle")
    argv = [prog, explicit, unwritable]
    labels = ("pop_none_open", "push_null", "annotate_null", "stats_null", "push_outer", "push_inner", "pop_inner",
              "pop_outer", "pop_extra", "annotate", "stats_too_small", "stats", "dump_explicit", "dump_unwritable",
              "dump_empty", "dump_default")

    plain = ctx.run(argv, preload=False)
    expect_ok(plain, "api_client without memtrace")
    check(stat_values(plain).get("loaded") == 0, f"loaded without memtrace\n{plain.describe()}")
    check(plain.out.statuses == {l: API_NOT_LOADED for l in labels},
          f"without memtrace every call must say MEMTRACE_NOT_LOADED: {plain.out.statuses}")
    check(plain.out.values.get("TEXT") == [["memtrace", "is", "not", "loaded", "(libmemtrace.so", "is", "not",
                                            "preloaded)"]], f"status text: {plain.out.values.get('TEXT')}")
    check(not os.path.exists(explicit) and stat_values(plain).get("errno_kept") == 1, plain.describe())

    r = ctx.run(argv)
    expect_ok(r, "api_client with memtrace")
    same_story(plain, r, "api_client")
    want = {l: API_OK for l in labels}
    want.update(pop_none_open=API_NO_OPEN_RANGE, push_null=API_INVALID, annotate_null=API_INVALID,
                stats_null=API_INVALID, pop_extra=API_NO_OPEN_RANGE, stats_too_small=API_INVALID,
                dump_unwritable=API_WRITE_FAILED, dump_empty=API_INVALID)
    check(r.out.statuses == want, f"statuses {r.out.statuses}\nexpected {want}\n{r.describe()}")
    st = stat_values(r)
    live_then = (1 << 20) + 65536 + 3000
    check(st.get("loaded") == 1 and st.get("version") == 1 and st.get("device_count") == 1, f"{st}")
    for k in ("allocated_current", "reserved_current", "reserved_peak", "all_allocated_current", "owners_current"):
        check(st.get(k) == live_then, f"{k} = {st.get(k)}, the program held {live_then} bytes\n{r.describe()}")
    check(st.get("allocations") == 3, f"allocations = {st.get('allocations')}, the program made 3")
    owners = {v[0]: int(v[1]) for v in r.out.values.get("OWNER", [])}
    check(owners == {"api_client": live_then}, f"owners of the device bytes: {owners}")
    check(st.get("errno_kept") == 1, f"a memtrace call changed errno\n{r.describe()}")
    check(any(blocker in l for l in r.problems()), f"the failed dump said nothing\n{r.describe()}")
    check(not os.path.exists(unwritable), "a file at the unwritable path")

    paths = dumped(r)
    check(paths.get("explicit") == explicit, f"written at {paths.get('explicit')!r}, asked for {explicit!r}")
    snap = check_api_snapshot(ctx, explicit, r, ("in_inner", "in_outer", "outside"))
    check_api_ranges(snap, r, {"in_inner": ["outer", "inner"], "in_outer": ["outer"], "outside": []}, "checkpoint one")
    default = paths.get("default", "")
    check(default in r.on_demand_snapshots(), f"the default dump went to {default!r}; on-demand files: "
                                              f"{r.on_demand_snapshots()}")
    check_api_snapshot(ctx, default, r, ("in_inner", "in_outer", "outside"))
    exit_snap = r.snapshot()
    check_against_program(exit_snap, r.out)
    check_api_ranges(exit_snap, r, {"in_inner": ["outer", "inner"], "in_outer": ["outer"], "outside": []},
                     "checkpoint one")
    ctx.check_snapshot_tool(exit_snap.path)

    # Loaded, not recording (MEMTRACE_RANKS leaves rank 3 out): a status that says so, nothing written.
    os.unlink(explicit)
    off = ctx.run(argv, env={"RANK": "3", "MEMTRACE_RANKS": "0"})
    expect_ok(off, "api_client not recorded")
    want = {l: API_NOT_RECORDING for l in labels}
    want.update(push_null=API_INVALID, annotate_null=API_INVALID, stats_null=API_INVALID,
                stats_too_small=API_NOT_RECORDING, dump_empty=API_INVALID)
    check(stat_values(off).get("loaded") == 1, off.describe())
    check(off.out.statuses == want, f"not recorded: statuses {off.out.statuses}\nexpected {want}")
    check(not os.path.exists(explicit) and not off.snapshots(), f"a snapshot of a process not recorded\n{off.describe()}")


def python_api_env(ctx):
    return {"PYTHONPATH": os.path.join(ctx.build, "lib", "memtrace", "python")}


def python_api_stats(r):
    out = {}
    for line in r.stdout.splitlines():
        for key in ("STATS ", "STATS0 "):
            if line.startswith(key):
                out[key.strip()] = json.loads(line[len(key):])
    return out


PY_API_LABELS = ("recording", "enter_forward", "decorated", "annotate", "memory_stats", "dump_explicit",
                 "dump_default", "dump_unwritable")


@case
def case_api_python_unloaded(ctx):
    """The Python module without libmemtrace.so: every call does nothing, raises nothing, and says
    MEMTRACE_NOT_LOADED; the program runs to its end as it would with memtrace."""
    ctx.need_sim()
    module = os.path.join(ctx.build, "lib", "memtrace", "python", "memtrace", "__init__.py")
    if not os.path.isfile(module):
        raise Skip(f"{module} is not in the build tree (python/CMakeLists.txt copies it)")
    script = os.path.join(ctx.source, "tests", "process", "api_python.py")
    explicit = os.path.join(ctx.tmp, "asked.pickle")
    r = ctx.run([sys.executable, script, explicit], preload=False, env=python_api_env(ctx))
    expect_ok(r, "api_python.py without memtrace")
    check(r.out.statuses == {l: API_NOT_LOADED for l in PY_API_LABELS}, f"statuses {r.out.statuses}")
    st = stat_values(r)
    check(st.get("loaded") == 0 and st.get("recording") == 0 and st.get("annotate") == 0, f"{st}")
    stats = python_api_stats(r)
    check(stats == {"STATS": {}, "STATS0": {}}, f"memory_stats without memtrace: {stats}")
    check(dumped(r) == {"explicit": "-", "default": "-", "unwritable": "-"}, f"dumps: {dumped(r)}")
    check(not os.path.exists(explicit), "a file written without memtrace")
    check(len(r.out.allocs("dev")) == 6, f"the program's allocations: {r.out.allocs('dev')}")


@case
def case_api_python(ctx):
    """The Python module under memtrace: ranges (with, decorator, another thread, an exception
    inside), a marker, memory_stats() in torch.cuda.memory_stats() style, dumps."""
    ctx.need_preload()
    ctx.need_sim()
    script = os.path.join(ctx.source, "tests", "process", "api_python.py")
    explicit = os.path.join(ctx.tmp, "asked.pickle")
    plain = ctx.run([sys.executable, script, explicit], preload=False, env=python_api_env(ctx))
    expect_ok(plain, "api_python.py without memtrace")
    r = ctx.run([sys.executable, script, explicit], env=python_api_env(ctx))
    expect_ok(r, "api_python.py with memtrace")
    same_story(plain, r, "api_python.py")
    want = {l: API_OK for l in PY_API_LABELS}
    want["dump_unwritable"] = API_WRITE_FAILED
    check(r.out.statuses == want, f"statuses {r.out.statuses}\nexpected {want}\n{r.describe()}")
    st = stat_values(r)
    check(st.get("loaded") == 1 and st.get("recording") == 1 and st.get("annotate") == 1, f"{st}")

    sizes = {l: s for l, s in (("in_block", 1 << 20), ("in_forward", 65536), ("in_step", 4096),
                               ("in_worker", 8192), ("outside", 3000), ("after_raise", 2048))}
    held = sum(sizes.values())
    stats = python_api_stats(r)
    s = stats.get("STATS", {})
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak"):
        check(s.get(key) == held, f"memory_stats()[{key!r}] = {s.get(key)}, the program held {held}: {s}")
    check(s.get("allocation.all.allocated") == len(sizes) and s.get("segment.all.allocated") == len(sizes), f"{s}")
    check(list(s.get("devices", {})) == ["0"], f"devices: {s.get('devices')}")  # JSON made the index a string
    check(s["devices"]["0"]["allocated_bytes.all.current"] == held, f"{s['devices']}")
    check(s.get("pinned_host_bytes.current") == 0, f"{s}")
    owners = s.get("owners", {})
    check(sum(o["current"] for o in owners.values()) == held and all(o["peak"] >= o["current"] for o in owners.values()),
          f"owners {owners} do not add up to {held}")
    s0 = stats.get("STATS0", {})
    check(s0.get("allocated_bytes.all.current") == held and "devices" not in s0, f"memory_stats(0): {s0}")

    paths = dumped(r)
    check(paths.get("explicit") == explicit, f"dump(path) returned {paths.get('explicit')!r}")
    check(paths.get("unwritable") == "-", f"a dump that failed returned {paths.get('unwritable')!r}")
    snap = check_api_snapshot(ctx, explicit, r, list(sizes))
    expect = {"in_block": ["forward", "block.3"], "in_forward": ["forward"], "in_step": ["optimizer_step"],
              "in_worker": ["worker"], "outside": [], "after_raise": []}
    check_api_ranges(snap, r, expect, "checkpoint")
    check(paths.get("default") in r.on_demand_snapshots(), f"dump() returned {paths.get('default')!r}; "
                                                           f"on-demand files: {r.on_demand_snapshots()}")
    exit_snap = r.snapshot()
    check_against_program(exit_snap, r.out)
    check_api_ranges(exit_snap, r, expect, "checkpoint")


# the real runtime ----------------------------------------------------------------------------

CUDA_LIB64 = "/usr/local/cuda/lib64"
DEBUG_GETPROC = re.compile(r"^memtrace: debug: getproc (\S+) (\d+) (\S+) -> (\S+)\s*$")
SIM_GETPROC = re.compile(r"^getproc (\S*) (\d+) (\S+) -> (-?\d+) (-?\d+) (\S+)\s*$")


@case
def case_real_runtime(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("real_runtime")
    if not os.path.isfile(os.path.join(CUDA_LIB64, "libcudart.so.13")):
        raise Skip(f"{CUDA_LIB64}/libcudart.so.13 not found")
    check(not os.path.exists(os.path.join(CUDA_LIB64, "libcuda.so.1")),
          f"{CUDA_LIB64} has a libcuda.so.1: the simulated driver would not be the one loaded")
    lib_path = f"{CUDA_LIB64}:{ctx.sim}"
    plain_log = os.path.join(ctx.tmp, "sim-plain.log")
    plain = ctx.run([prog], preload=False, lib_path=lib_path, env={"SIMCUDA_LOG": plain_log})
    # The simulation does not serve cuGetExportTable, so the runtime stops after resolving everything:
    # cudaErrorInitializationError (3) per the design notes; 801 (cudaErrorNotSupported) when the
    # driver's cuGetExportTable answers CUDA_ERROR_NOT_SUPPORTED. Either way: a failure, the same
    # with and without memtrace.
    check(plain.rc == 0 and len(plain.out.rcs) == 1 and plain.out.rcs[0][0] == "cudaMalloc"
          and plain.out.rcs[0][1] != 0,
          f"the real runtime on the simulated driver should fail cudaMalloc\n{plain.describe()}")
    print(f"  cudaMalloc on the simulated driver returns {plain.out.rcs[0][1]}")
    log = os.path.join(ctx.tmp, "sim.log")
    r = ctx.run([prog], lib_path=lib_path, env={"SIMCUDA_LOG": log, "MEMTRACE_DEBUG": "1"})
    same_story(plain, r, "real_runtime")
    check(os.path.isfile(log), f"no SIMCUDA_LOG written\n{r.describe()}")
    sim = []
    with open(log) as f:
        for line in f:
            m = SIM_GETPROC.match(line)
            if m:
                sim.append((m.group(1), int(m.group(2)), int(m.group(3), 0), int(m.group(4)), int(m.group(5))))
    check(len(sim) > 100, f"the simulated driver logged only {len(sim)} lookups")
    subs = {}
    for line in r.stderr.splitlines():
        m = DEBUG_GETPROC.match(line)
        if m:
            subs[(m.group(1), int(m.group(2)), int(m.group(3), 0))] = m.group(4)
    check("memtrace: debug: dlsym cuGetProcAddress_v2 -> wrapper" in r.stderr,
          f"with MEMTRACE_DEBUG=1, no 'memtrace: debug: dlsym cuGetProcAddress_v2 -> wrapper' line: the runtime's "
          f"dlsym of cuGetProcAddress_v2 was not swapped, or not logged ({len(r.memtrace_lines())} memtrace lines "
          f"on stderr, {len(r.snapshots())} snapshots written)\n{r.describe()}")
    self_lookups = [k for k in subs if k[0] == "cuGetProcAddress" and k[1] == 12000]
    check(self_lookups, f"the runtime's self-lookup of cuGetProcAddress at 12000 was not substituted; "
                        f"substitutions: {sorted(subs)[:20]}\n{r.describe()}")
    check(all("cuGetProcAddress" in subs[k] for k in self_lookups), f"self-lookup got {[subs[k] for k in self_lookups]}")
    check(any(k[0] == "cuGetProcAddress" and k[1] == 11030 for k in subs),
          "the runtime's self-lookup of cuGetProcAddress at 11030 was not substituted")
    # Every memory entry point the runtime obtained from the driver was handed memtrace's wrapper.
    memory = {"cuMemAlloc", "cuMemFree", "cuMemAllocPitch", "cuMemAllocManaged", "cuMemAllocAsync",
              "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuMemHostAlloc", "cuMemFreeHost", "cuMemHostRegister",
              "cuMemHostUnregister", "cuMemAllocHost"}
    looked_up = [s for s in sim if s[0] in memory and s[3] == 0 and s[4] == 0]
    check({"cuMemAlloc", "cuMemFree", "cuMemAllocAsync"} <= {s[0] for s in looked_up},
          f"the runtime did not look up the basic memory functions: {sorted({s[0] for s in looked_up})}")
    missing = [s for s in looked_up if (s[0], s[1], s[2]) not in subs]
    check(not missing, f"memory entry points the runtime got without memtrace's wrapper: {missing[:12]}")
    ptsz = [(s, subs[(s[0], s[1], s[2])]) for s in looked_up if s[2] & 2 and s[0].endswith("Async")]
    check(ptsz, "the runtime made no per-thread (flags 2) lookups of the stream-ordered functions")
    for s, w in ptsz:
        check(w.endswith("_ptsz"), f"{s[0]}@{s[1]} flags {s[2]} (per-thread) was given {w}")
    print(f"  {len(sim)} lookups by the real runtime, {len(subs)} substituted; memory ones: "
          f"{sorted({(s[0], s[2]) for s in looked_up})}")
    snaps = r.snapshots()
    if snaps:
        ctx.check_snapshot_tool(snaps[0])


# the command-line tool -----------------------------------------------------------------------

def run_cli(ctx, args, env=None, timeout=20, stdin=None):
    return ctx.run([ctx.cli] + args, preload=False, env=env, lib_path="", timeout=timeout, stdin=stdin)


@case
def case_cli_usage(ctx):
    ctx.need_cli()
    r = run_cli(ctx, ["--help"])
    check(r.rc == 0 and "run" in r.stdout and "usage" in r.stdout, f"memtrace --help\n{r.describe()}")
    r = run_cli(ctx, ["--version"])
    check(r.rc == 0 and re.match(r"^memtrace \d+\.\d+\.\d+\s*$", r.stdout), f"memtrace --version\n{r.describe()}")
    r = run_cli(ctx, ["run", "--help"])
    check(r.rc == 0 and "--sim" in r.stdout and "--no-summary" in r.stdout, f"memtrace run --help\n{r.describe()}")
    r = run_cli(ctx, ["help", "run"])
    check(r.rc == 0 and "--sim" in r.stdout, f"memtrace help run\n{r.describe()}")
    for args in (["frobnicate"], [], ["--bogus"], ["run"], ["run", "--stacks", "all", "--", "true"],
                 ["run", "--frob", "--", "true"], ["run", "-o"]):
        r = run_cli(ctx, args)
        check(r.rc == 2, f"memtrace {' '.join(args)}: exit status {r.rc}, expected 2\n{r.describe()}")
        check(not r.stdout, f"memtrace {' '.join(args)}: wrote to stdout\n{r.describe()}")
        if not args:
            check("usage" in r.stderr, f"memtrace: usage not on stderr\n{r.describe()}")
            continue
        # A usage error is the problem in one line and a hint, not the whole help (issue 14).
        lines = r.stderr.strip().splitlines()
        check(1 <= len(lines) <= 3 and "--help" in lines[-1],
              f"memtrace {' '.join(args)}: not one line and a hint\n{r.describe()}")


@case
def case_run_without_cuda(ctx):
    """A program that makes no CUDA call says so in one line at exit (issue 14), only for the process
    `memtrace run` started, and not with --no-summary."""
    ctx.need_preload()
    ctx.need_sim()
    r = run_cli(ctx, ["run", "--sim", "--", "/bin/true"])
    check(r.rc == 0, f"exit status {r.rc}\n{r.describe()}")
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(len(lines) == 1 and "no CUDA memory call seen" in lines[0] and "no snapshot written" in lines[0],
          f"expected one line saying nothing was recorded\n{r.describe()}")
    r = run_cli(ctx, ["run", "--sim", "--", "/bin/sh", "-c", "/bin/true; /bin/true"])
    # The shell's children stay silent (their pid is not the one `run` started); the shell itself may
    # leave by _exit and say nothing.
    check(r.stderr.count("no CUDA memory call seen") <= 1, f"the shell's children spoke too\n{r.describe()}")
    r = run_cli(ctx, ["run", "--sim", "--no-summary", "--", "/bin/true"])
    check(not r.stderr.strip(), f"--no-summary still printed\n{r.describe()}")


@case
def case_cli_stdin(ctx):
    """'-' reads a snapshot from standard input (a pipe), as other tools do (issue 14)."""
    ctx.need_cli()
    data = os.path.join(ctx.source, "cli", "analysis", "tests", "data", "torch_oom_p4.pickle")
    r = ctx.run(["/bin/sh", "-c", f"cat '{data}' | '{ctx.cli}' summary -"], preload=False, lib_path="")
    check(r.rc == 0 and "PyTorch snapshot" in r.stdout and "out of memory" in r.stdout, f"summary -\n{r.describe()}")
    with open(data, "rb") as f:
        r = run_cli(ctx, ["peak", "--json", "-"], stdin=f)
    check(r.rc == 0 and json.loads(r.stdout)["devices"], f"peak --json - < file\n{r.describe()}")


@case
def case_report_beside_snapshot(ctx):
    """MEMTRACE_REPORT=1 writes each snapshot's HTML report beside it (issue 15), through `memtrace
    report` run as a child that neither is profiled nor speaks on the program's stdout; the exit
    summary names the page, or the command that writes one. A bad value: one warning, no report."""
    ctx.need_preload()
    ctx.need_cli()
    ctx.need_sim("libcuda.so.1", "libcudart.so.13")
    exe = os.path.join(ctx.examples, "leak")
    if not os.path.isfile(exe):
        raise Skip(f"example {exe} not built")
    assets = os.path.join(ctx.tmp, "assets")
    os.makedirs(assets)
    with open(os.path.join(assets, "report.html"), "w") as f:
        f.write("<style>/*MEMTRACE_STYLES*/</style><!--MEMTRACE_DATA--><!--MEMTRACE_SCRIPTS-->\n")
    for name in ("styles.txt", "scripts.txt"):
        open(os.path.join(assets, name), "w").close()
    for value, want_report in (("1", True), ("0", False), ("maybe", False)):
        outdir = os.path.join(ctx.tmp, f"report-{value}")
        os.makedirs(outdir)
        r = ctx.run([ctx.cli, "run", "--sim", "-o", os.path.join(outdir, "leak-%p.pickle"), "--", exe], preload=False,
                    lib_path="", env={"MEMTRACE_REPORT": value, "MEMTRACE_REPORT_ASSETS": assets})
        check(r.rc == 0, f"MEMTRACE_REPORT={value}: exit status {r.rc}\n{r.describe()}")
        snaps = [f for f in os.listdir(outdir) if f.endswith(".pickle")]
        pages = [f for f in os.listdir(outdir) if f.endswith(".html")]
        check(len(snaps) == 1, f"MEMTRACE_REPORT={value}: snapshots {snaps}")
        check("wrote " not in r.stdout, f"MEMTRACE_REPORT={value}: the report's own line reached the program's stdout\n{r.describe()}")
        if want_report:
            check(pages == [snaps[0][:-len(".pickle")] + ".html"], f"MEMTRACE_REPORT=1: pages {pages} beside {snaps}")
            html = open(os.path.join(outdir, pages[0]), encoding="utf-8").read() if pages else ""
            check('id="memtrace-data"' in html and '"producer":"memtrace"' in html, "the page holds no data")
            check(f"memtrace: report: {os.path.join(outdir, pages[0]) if pages else '?'}" in r.stderr,
                  f"the log does not say where the page is\n{r.describe()}")
            check("MEMTRACE_REPORT=1: written next" in r.stderr, f"the summary does not name the page\n{r.describe()}")
        else:
            check(not pages, f"MEMTRACE_REPORT={value}: a page was written: {pages}")
            check("see it:   memtrace report " in r.stderr, f"the summary does not name the command\n{r.describe()}")
        warned = r.stderr.count("MEMTRACE_REPORT='maybe' is not 0 or 1")
        check(warned == (1 if value == "maybe" else 0), f"MEMTRACE_REPORT={value}: {warned} warnings\n{r.describe()}")


ENV_DUMP = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
            "('LD_PRELOAD', 'LD_LIBRARY_PATH', 'MEMTRACE_OUTPUT', 'MEMTRACE_SUMMARY', 'MEMTRACE_STACKS', "
            "'MEMTRACE_DEBUG', 'PYTHONPATH')}))")


def fake_prefix(ctx):
    """A copy of bin/memtrace in a prefix whose lib/libmemtrace.so is a harmless stand-in."""
    chain = os.path.join(ctx.bindir, "libchain.so")
    if not os.path.isfile(chain):
        raise Skip(f"{chain} not built")
    prefix = os.path.join(ctx.tmp, "prefix")
    os.makedirs(os.path.join(prefix, "bin"))
    os.makedirs(os.path.join(prefix, "lib", "memtrace", "sim"))
    shutil.copy2(ctx.cli, os.path.join(prefix, "bin", "memtrace"))
    shutil.copy2(chain, os.path.join(prefix, "lib", "libmemtrace.so"))
    open(os.path.join(prefix, "lib", "memtrace", "sim", "libcuda.so.1"), "w").close()
    return prefix, chain


@case
def case_cli_run_env(ctx):
    import json
    ctx.need_cli()
    prefix, chain = fake_prefix(ctx)
    tool = os.path.join(prefix, "bin", "memtrace")
    lib = os.path.join(prefix, "lib", "libmemtrace.so")
    sim = os.path.join(prefix, "lib", "memtrace", "sim")
    py = [sys.executable, "-c", ENV_DUMP]

    def env_of(args, env=None):
        r = ctx.run([tool] + args + py, preload=False, lib_path="/old/lib", env=env)
        check(r.rc == 0, f"memtrace {' '.join(args)}\n{r.describe()}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    got = env_of(["run", "--"])
    check(got["LD_PRELOAD"] == lib, f"LD_PRELOAD={got['LD_PRELOAD']}, expected {lib}")
    check(got["LD_LIBRARY_PATH"] == "/old/lib", f"without --sim LD_LIBRARY_PATH changed: {got['LD_LIBRARY_PATH']}")
    for k in ("MEMTRACE_OUTPUT", "MEMTRACE_SUMMARY", "MEMTRACE_STACKS"):
        check(got[k] is None, f"{k} set without its option: {got[k]}")
    got = env_of(["run", "--sim", "-o", "/tmp/x-%p.pickle", "--no-summary", "--stacks", "none", "--"],
                 env={"LD_PRELOAD": chain, "MEMTRACE_DEBUG": "1"})
    check(got["LD_PRELOAD"] == f"{lib}:{chain}", f"LD_PRELOAD={got['LD_PRELOAD']}, expected {lib}:{chain}")
    check(got["LD_LIBRARY_PATH"] == f"{sim}:/old/lib", f"LD_LIBRARY_PATH={got['LD_LIBRARY_PATH']}")
    check(got["MEMTRACE_OUTPUT"] == "/tmp/x-%p.pickle", f"MEMTRACE_OUTPUT={got['MEMTRACE_OUTPUT']}")
    check(got["MEMTRACE_SUMMARY"] == "0", f"MEMTRACE_SUMMARY={got['MEMTRACE_SUMMARY']}")
    check(got["MEMTRACE_STACKS"] == "none", f"MEMTRACE_STACKS={got['MEMTRACE_STACKS']}")
    check(got["MEMTRACE_DEBUG"] == "1", "other MEMTRACE_* variables must pass through")
    got = env_of(["run", "--output=/tmp/y.pickle", "--stacks=native"], env={"LD_PRELOAD": f"{lib} {chain}"})
    check(got["LD_PRELOAD"] == f"{lib}:{chain}", f"LD_PRELOAD={got['LD_PRELOAD']} (duplicate not removed?)")
    check(got["MEMTRACE_OUTPUT"] == "/tmp/y.pickle" and got["MEMTRACE_STACKS"] == "native", f"{got}")
    # A sanitizer runtime must stay the first library loaded; memtrace goes right after it.
    asan = "/nonexistent/sanitizer/libasan.so.8"  # a name is enough: ld.so skips a missing file
    got = env_of(["run", "--"], env={"LD_PRELOAD": f"{asan} {chain}"})
    check(got["LD_PRELOAD"] == f"{asan}:{lib}:{chain}", f"LD_PRELOAD={got['LD_PRELOAD']}, expected the sanitizer first")
    # The Python module's folder is appended to PYTHONPATH, once, when the prefix has the module.
    got = env_of(["run", "--"], env={"PYTHONPATH": None})
    check(got["PYTHONPATH"] is None, f"PYTHONPATH={got['PYTHONPATH']} set by a prefix without the Python module")
    pydir = os.path.join(prefix, "lib", "memtrace", "python")
    os.makedirs(os.path.join(pydir, "memtrace"))
    got = env_of(["run", "--"], env={"PYTHONPATH": None})
    check(got["PYTHONPATH"] == pydir, f"PYTHONPATH={got['PYTHONPATH']}, expected {pydir}")
    got = env_of(["run", "--"], env={"PYTHONPATH": "/mine:/theirs"})
    check(got["PYTHONPATH"] == f"/mine:/theirs:{pydir}", f"PYTHONPATH={got['PYTHONPATH']}: not appended")
    got = env_of(["run", "--"], env={"PYTHONPATH": f"{pydir}:/mine"})
    check(got["PYTHONPATH"] == f"{pydir}:/mine", f"PYTHONPATH={got['PYTHONPATH']}: added twice")
    # A prefix without the library: an error, not a run without memtrace.
    os.unlink(lib)
    r = ctx.run([tool, "run", "--"] + py, preload=False)
    check(r.rc == 127 and "libmemtrace.so" in r.stderr and not r.stdout, f"missing library\n{r.describe()}")


@case
def case_cli_exit_status(ctx):
    ctx.need_cli()
    prefix, _ = fake_prefix(ctx)
    tool = os.path.join(prefix, "bin", "memtrace")
    r = ctx.run([tool, "run", "--", "sh", "-c", "exit 7"], preload=False)
    check(r.rc == 7, f"exit status {r.rc}, expected 7\n{r.describe()}")
    r = ctx.run([tool, "run", "--", "sh", "-c", "kill -TERM $$"], preload=False)
    check(r.rc == -15, f"a program killed by SIGTERM: status {r.rc}, expected -15 (memtrace must exec)\n{r.describe()}")
    r = ctx.run([tool, "run", "--", "/nonexistent/program", "x"], preload=False)
    check(r.rc == 127 and "/nonexistent/program" in r.stderr, f"exec failure\n{r.describe()}")
    r = ctx.run([tool, "run", "sh", "-c", "echo $0 $1", "first", "second"], preload=False)
    check(r.rc == 0 and r.stdout.strip() == "first second", f"arguments without --\n{r.describe()}")
    # A static executable: it runs as it would, and memtrace says why it records nothing.
    static = ctx.program("static_hello")
    r = ctx.run([tool, "run", "--", static], preload=False)
    check(r.rc == 5 and "STATIC hello" in r.stdout, f"the static program did not run as itself\n{r.describe()}")
    check("statically linked" in r.stderr and "no snapshot" in r.stderr, f"no word on the static program\n{r.describe()}")
    r = ctx.run([tool, "run", "--", "sh", "-c", "exit 0"], preload=False)
    check("statically linked" not in r.stderr, f"a dynamic program called static\n{r.describe()}")


# examples ------------------------------------------------------------------------------------

def run_example(ctx, name, env=None, sim_libs=("libcuda.so.1", "libcudart.so.13")):
    ctx.need_preload()
    ctx.need_cli()
    ctx.need_sim(*sim_libs)
    exe = os.path.join(ctx.examples, name)
    if not os.path.isfile(exe):
        raise Skip(f"example {exe} not built")
    outdir = os.path.join(ctx.tmp, f"example-{name}")
    os.makedirs(outdir)
    r = ctx.run([ctx.cli, "run", "--sim", "-o", os.path.join(outdir, "%e-%p.pickle"), "--", exe],
                preload=False, lib_path="", env=env)
    check(r.rc == 0, f"example {name} failed\n{r.describe()}")
    files = os.listdir(outdir)
    check(len(files) == 1 and files[0].startswith(name + "-"), f"snapshots {files} (expected {name}-<pid>.pickle)")
    snap = Snapshot(os.path.join(outdir, files[0]))
    check_entry_fields(snap)
    ctx.check_snapshot_tool(snap.path)
    return r, snap


@case
def case_example_leak(ctx):
    r, snap = run_example(ctx, "leak")
    sizes = sorted(s["total_size"] for s in snap.segments)
    check(sizes == [1 << 20, 8 << 20], f"leak: segments of {sizes}, expected the two leaks [1 MiB, 8 MiB]")
    summary = r.summary()
    check(summary, f"no summary on stderr\n{r.describe()}")
    check(re.search(r"leak|live|still", summary, re.I), f"the summary does not mention live memory:\n{summary}")
    check(re.search(r"9\.00? ?Mi?B|9437184|9,437,184|9 ?MiB", summary),
          f"the summary does not show the 9 MiB still allocated:\n{summary}")


@case
def case_example_runtime_loop(ctx):
    r, snap = run_example(ctx, "runtime_loop")
    check(not snap.segments, f"runtime_loop frees everything; segments: {len(snap.segments)}")
    check(len(snap.actions("alloc")) == 13, f"{len(snap.actions('alloc'))} alloc entries, expected 12 + 1 async")
    ht = snap.host_entries()
    check(any(e.get("action") == "alloc" and e.get("size") == 4 << 20 for e in ht),
          f"the pinned staging buffer is not in host_traces: {describe_entries(ht)}")
    check(not snap.host_segments(), "pinned memory left in host_segments")


@case
def case_example_vmm(ctx):
    r, snap = run_example(ctx, "vmm", sim_libs=("libcuda.so.1",))
    check(not snap.segments, "vmm unmaps everything")
    m = re.search(r"mapped (\d+) bytes at (0x[0-9a-f]+)", r.stdout)
    check(m, f"no 'mapped' line\n{r.describe()}")
    size, addr = int(m.group(1)), int(m.group(2), 16)
    check(any(e["addr"] == addr and e["size"] == size for e in snap.actions("alloc")),
          f"no alloc entry for the mapping: {describe_entries(snap.actions('alloc'))}")
    check(any(e["addr"] == addr for e in snap.actions("free_completed")), "the mapping's free is missing")


@case
def case_example_nccl_allreduce(ctx):
    r, snap = run_example(ctx, "nccl_allreduce", env={"SIMCUDA_DEVICES": "2"},
                          sim_libs=("libcuda.so.1", "libcudart.so.13", "libnccl.so.2"))
    check("2 device(s)" in r.stdout, f"expected two simulated devices\n{r.describe()}")
    check(not snap.segments, f"nccl_allreduce frees everything; segments: "
                             f"{[(hex(s['address']), s['total_size']) for s in snap.segments]}")
    check(any(e.get("category") == "nccl" for e in snap.actions("alloc")), "no allocation with category 'nccl'")
    # Everything was freed, but NCCL's peak is still in the summary's by-owner table.
    check(re.search(r"device memory by owner.*\n\s+nccl\s+0 B /\s+[1-9][0-9.]* MiB", r.summary()),
          f"the summary has no 'nccl  0 B / <peak>' owner line:\n{r.summary()}")


@case
def case_example_pytorch(ctx):
    script = os.path.join(ctx.source, "examples", "pytorch_example.py")
    r = ctx.run([sys.executable, script], preload=False, lib_path="", timeout=300)
    check(r.rc == 0, f"pytorch_example.py\n{r.describe()}")
    try:
        import importlib.util
        have_torch = importlib.util.find_spec("torch") is not None
    except Exception:  # noqa: BLE001
        have_torch = False
    if not have_torch:
        check(r.stdout.strip() == "torch not installed", f"without torch: {r.stdout!r}")


# the caching allocator (MEMTRACE_ALLOCATOR=caching) ------------------------------------------

CACHING = {"MEMTRACE_ALLOCATOR": "caching"}


def tiled_blocks(snap):
    """Checks that blocks tile their segments exactly; returns {block address: (block, segment)}."""
    out = {}
    for s in snap.segments:
        at = s["address"]
        for b in s.get("blocks", []):
            check(b.get("state") in ("active_allocated", "active_pending_free", "inactive"),
                  f"segment {hex(s['address'])}: block state {b.get('state')!r}")
            check(b.get("address", at) == at, f"segment {hex(s['address'])}: block at {hex(b.get('address'))}, "
                                              f"expected {hex(at)} (blocks must be contiguous)")
            check(b["size"] > 0, f"segment {hex(s['address'])}: empty block at {hex(at)}")
            out[at] = (b, s)
            at += b["size"]
        check(at == s["address"] + s["total_size"],
              f"segment {hex(s['address'])}: blocks cover {at - s['address']} of {s['total_size']} bytes")
    return out


def check_caching_snapshot(snap, out, mode="caching", expandable=False):
    """Segments are the allocator's, tiled by its blocks; what the program still holds is exactly
    the set of active_allocated blocks (address, bytes asked); the trace has one alloc per
    allocation the program made, with the bytes it asked for."""
    check_entry_fields(snap)
    blocks = tiled_blocks(snap)
    held = out.live("dev")
    active = {a for a, (b, _) in blocks.items() if b["state"] == "active_allocated"}
    check(active == set(held), f"active_allocated blocks {sorted(hex(a) for a in active)}, "
                               f"the program holds {sorted(hex(a) for a in held)}")
    for addr, (req, _) in held.items():
        b, s = blocks[addr]
        check(b["requested_size"] == req, f"block {hex(addr)}: requested_size {b['requested_size']}, asked {req}")
        check(b["size"] >= req, f"block {hex(addr)}: size {b['size']} for {req} bytes")
        check(b["frames"], f"block {hex(addr)} has no frames")
    allocs = snap.actions("alloc")
    check(sorted(e["size"] for e in allocs) == sorted(e[3] for e in out.allocs("dev")),
          f"alloc entries {sorted(e['size'] for e in allocs)}, the program asked "
          f"{sorted(e[3] for e in out.allocs('dev'))}")
    for s in snap.segments:
        check(s["is_expandable"] == expandable, f"segment {hex(s['address'])}: is_expandable {s['is_expandable']}")
    seg_actions = {e["action"] for e in snap.entries() for e in [e[1]] if e["action"].startswith("segment")}
    want = {"segment_map"} if expandable else {"segment_alloc"}
    check((want <= seg_actions or not snap.segments) and not ({"segment_alloc", "segment_free"} & seg_actions if expandable else
                                       {"segment_map", "segment_unmap"} & seg_actions),
          f"segment actions {seg_actions} for expandable={expandable}")
    settings = snap.data.get("allocator_settings", {})
    check(settings.get("memtrace", {}).get("allocator") == mode,
          f"allocator_settings['memtrace']['allocator'] = {settings.get('memtrace', {}).get('allocator')!r}, "
          f"expected {mode!r}")
    check(settings.get("expandable_segments") == expandable, f"allocator_settings: {settings}")


def caching_run(ctx, scenario, env=None, checker=True, mode="caching", expandable=False):
    e = dict(CACHING)
    e.update(env or {})
    r = ctx.run([ctx.program("caching_ops"), scenario], env=e)
    expect_ok(r, f"caching_ops {scenario} ({e})")
    snap = r.snapshot()
    try:
        check_caching_snapshot(snap, r.out, mode=mode, expandable=expandable)
    except Failure as f:
        fail(f"{f}\n{r.describe()}")
    if checker:
        ctx.check_snapshot_tool(snap.path)
    return r, snap


@case
def case_caching_example(ctx):
    """runtime_loop (cudaMalloc/cudaFree through the real runtime's path) served by the cache."""
    r, snap = run_example(ctx, "runtime_loop", env=CACHING)
    blocks = tiled_blocks(snap)
    check(snap.segments, "caching mode keeps its segments cached at exit; none in the snapshot")
    check(all(b["state"] != "active_allocated" for b, _ in blocks.values()),
          "runtime_loop frees everything, yet a block is active_allocated")
    allocs = snap.actions("alloc")
    check(len(allocs) == 13, f"{len(allocs)} alloc entries, expected 12 + 1 async")
    segs = snap.actions("segment_alloc")
    check(len(segs) < 12, f"{len(segs)} segment_alloc entries for 12 cudaMalloc calls: nothing was reused")
    check(snap.data["allocator_settings"]["memtrace"]["allocator"] == "caching", "allocator_settings")
    check("caching allocator:" in r.summary(), f"the summary does not show the cache:\n{r.summary()}")
    print(f"  {len(allocs)} allocations, {len(segs)} segment_alloc, {len(snap.segments)} segments cached at exit")


@case
def case_caching_mix(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("caching_ops")
    plain = ctx.run([prog, "mix"], env={"MEMTRACE_STACKS": "none"})
    expect_ok(plain, "caching_ops mix, passthrough")
    r, snap = caching_run(ctx, "mix", env={"MEMTRACE_ALLOC_CONF": "max_split_size_mb:40"})
    check(plain.out.rcs == r.out.rcs, f"return codes differ\n  passthrough: {plain.out.rcs}\n  caching: {r.out.rcs}")
    check(plain.out.values.get("PITCH") == r.out.values.get("PITCH"),
          f"pitch differs: {plain.out.values.get('PITCH')} / {r.out.values.get('PITCH')}")
    check(dict(r.out.rcs).get("free_inside") == 1, "a free inside a block must be refused (CUDA_ERROR_INVALID_VALUE)")
    check(any(s["total_size"] == 2 << 20 and s["segment_type"] == "small" for s in snap.segments),
          "no 2 MiB small-pool segment")
    check(snap.data["allocator_settings"]["max_split_size"] == 40 << 20,
          f"max_split_size {snap.data['allocator_settings']['max_split_size']}, MEMTRACE_ALLOC_CONF said 40 MiB")
    check(snap.data["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:40", "conf string")
    check(r.warnings() == [], f"warnings: {r.warnings()}")


def replay_expandable_view(snap, d=0):
    """The viewer's "Allocator State History" for expandable segments (docs/snapshot-format.md, "The Allocator State History view"):
    undo events newest first, segment_map carving its range out of the segment holding it and
    segment_unmap putting it back (merged with a neighbour); every live block must stay inside a
    segment. (output/tests/check_snapshot.py treats segment_map like segment_alloc, a range of its
    own, which mapped ranges that grew are not.)"""
    segs = {s["address"]: s["total_size"] for s in snap.segments if s["device"] == d}
    blocks = {}
    for s in snap.segments:
        at = s["address"]
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[at] = b["size"]
            at += b["size"]

    def holder(addr):
        return next((a for a, n in segs.items() if a <= addr < a + n), None)

    for e in reversed(snap.device_traces[d]):
        a, addr, size = e["action"], e.get("addr"), e["size"]
        if a in ("free_completed", "free"):
            blocks[addr] = size
        elif a == "alloc":
            blocks.pop(addr, None)
        elif a == "segment_unmap":
            segs[addr] = size
            for x in list(segs):  # merge with the ranges it touches
                if x + segs[x] == addr and x in segs and addr in segs:
                    segs[x] += segs.pop(addr)
                    addr = x
            if addr + segs[addr] in segs:
                segs[addr] += segs.pop(addr + segs[addr])
        elif a == "segment_map":
            h = holder(addr)
            check(h is not None and addr + size <= h + segs[h],
                  f"undoing segment_map {hex(addr)}+{size}: no segment holds it ({segs})")
            end, h_end = addr + size, h + segs[h]
            del segs[h]
            if addr > h:
                segs[h] = addr - h
            if end < h_end:
                segs[end] = h_end - end
        for b in blocks:
            check(holder(b) is not None, f"after undoing {a} {hex(addr or 0)}: block {hex(b)} lies in no segment")


@case
def case_caching_expandable(ctx):
    ctx.need_preload()
    ctx.need_sim()
    env = {"MEMTRACE_ALLOC_CONF": "expandable_segments:True"}
    r, snap = caching_run(ctx, "mix", env=env, expandable=True)
    maps = snap.actions("segment_map")
    check(maps and all(e["size"] % (2 << 20) == 0 for e in maps), f"segment_map entries: {describe_entries(maps)}")
    replay_expandable_view(snap)
    # Growth: two pages mapped back to back are one segment of 40 MiB.
    r, snap = caching_run(ctx, "grow", env=env, checker=False, expandable=True)
    big = [s for s in snap.segments if s["total_size"] == 40 << 20]
    check(len(big) == 1, f"segments {[(hex(s['address']), s['total_size']) for s in snap.segments]}, expected "
                         f"one mapped range of 40 MiB")
    grow_maps = [e for e in snap.actions("segment_map") if big[0]["address"] <= e["addr"] < big[0]["address"] + (40 << 20)]
    check(len(grow_maps) == 2, f"segment_map entries in the 40 MiB range: {describe_entries(grow_maps)}")
    replay_expandable_view(snap)
    print(f"  mix: {len(maps)} segment_map entries; grow: one 40 MiB range from {len(grow_maps)} maps")


@case
def case_caching_free_safety(ctx):
    ctx.need_preload()
    ctx.need_sim()
    r, snap = caching_run(ctx, "safety")
    check(r.out.values.get("SAME") == [["reuse", "1"]], f"B was not handed out at A's address: {r.out.values}")
    check(r.out.values.get("INTACT") == [["b", "1"]],
          f"the memset queued before cuMemFree(A) landed in B's data\n{r.describe()}")
    # Without the synchronize before reuse the same program does see it: the check can fail.
    unsafe = ctx.run([ctx.program("caching_ops"), "safety"],
                     env=dict(CACHING, MEMTRACE_ALLOC_CONF="memtrace_deferred_free:False"))
    expect_ok(unsafe)
    check(unsafe.out.values.get("INTACT") == [["b", "0"]],
          f"with memtrace_deferred_free:False the queued memset should corrupt B: {unsafe.out.values}")


@case
def case_caching_oom(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("caching_ops")
    for env in ({"SIMCUDA_MEMORY": "64M"}, {"SIMCUDA_FAIL": "cuMemAlloc_v2"}, {"SIMCUDA_FAIL": "cuMemAlloc_v2=999"}):
        plain = ctx.run([prog, "oom"], env=dict(env, MEMTRACE_STACKS="none"))
        cached = ctx.run([prog, "oom"], env=dict(env, **CACHING))
        expect_ok(plain, f"oom {env} passthrough")
        expect_ok(cached, f"oom {env} caching")
        check(plain.out.rcs == cached.out.rcs,
              f"{env}: return codes differ\n  passthrough: {plain.out.rcs}\n  caching:     {cached.out.rcs}")
        snap = cached.snapshot()
        check_caching_snapshot(snap, cached.out)
        ctx.check_snapshot_tool(snap.path)
        ooms = snap.actions("oom")
        if env.get("SIMCUDA_MEMORY"):
            check(dict(cached.out.rcs).get("alloc_40m") == 0, "cached segments were not given back before retrying")
            check(len(ooms) == 1 and ooms[0]["size"] == 100 << 20 and 0 <= ooms[0]["device_free"] <= 64 << 20,
                  f"oom entries: {ooms}")
        print(f"  {env}: {[c for _, c in cached.out.rcs if c]} (same as passthrough), {len(ooms)} oom entries")


@case
def case_caching_range(ctx):
    ctx.need_preload()
    ctx.need_sim()
    r, snap = caching_run(ctx, "range")
    a = r.out.allocs("dev")[0][2]
    b = r.out.allocs("dev")[1][2]
    ranges = {v[0]: (int(v[1], 16), int(v[2])) for v in r.out.values.get("RANGE", [])}
    want = {"range_a": (a, 1024), "range_b": (b, 3072), "attr_b": (b, 3072), "attrs_a": (a, 1024)}
    check(ranges == want, f"ranges {ranges}, expected the blocks {want}")
    check(b == a + 1024, f"a and b should share one segment: {hex(a)}, {hex(b)}")
    check(r.out.values.get("ORDINAL") == [["attrs_a", "0"]], "other attributes still come from the driver")
    check(dict(r.out.rcs).get("range_freed") == 500, "a freed block is not an allocation (CUDA_ERROR_NOT_FOUND)")


@case
def case_caching_ipc(ctx):
    ctx.need_preload()
    ctx.need_sim()
    r, snap = caching_run(ctx, "ipc")
    wrapped_by_memtrace(r, "cuIpcGetMemHandle")
    rcs = dict(r.out.rcs)
    check(rcs.get("ipc_a") == 801 and rcs.get("ipc_a_again") == 801,
          f"cuIpcGetMemHandle of a cached block: {rcs}, expected CUDA_ERROR_NOT_SUPPORTED (801)")
    warns = r.warnings()
    check(len(warns) == 1 and "MEMTRACE_ALLOCATOR" in warns[0], f"expected one warning naming MEMTRACE_ALLOCATOR: {warns}")


@case
def case_caching_pluggable(ctx):
    """memtrace_malloc/memtrace_free (PyTorch's CUDAPluggableAllocator) use the caching allocator
    even when MEMTRACE_ALLOCATOR is not set."""
    ctx.need_preload()
    ctx.need_sim()
    r, snap = caching_run(ctx, "pluggable", env={"MEMTRACE_ALLOCATOR": None}, mode="passthrough+memtrace_malloc")
    wrapped_by_memtrace(r, "memtrace_malloc")
    check(r.out.values.get("INTACT") == [["p", "1"]], "data written through a memtrace_malloc pointer")
    p = r.out.allocs("dev")[0][2]
    check(r.out.values.get("RANGE") == [["range_p", hex(p), "1024"]], f"range of p: {r.out.values.get('RANGE')}")
    q = r.out.allocs("dev")[1][2]
    seg = next(s for s in snap.segments if s["address"] <= q < s["address"] + s["total_size"])
    check(seg["stream"] != 0, "the block's segment should carry PyTorch's stream")


@case
def case_caching_threads(ctx):
    """Concurrent allocation in caching mode: no event lost, and snapshots taken while 8 threads
    allocate (MEMTRACE_INTERVAL) are consistent cuts that tile."""
    ctx.need_preload()
    ctx.need_sim()
    r = ctx.run([ctx.program("thread_stress")], env=dict(CACHING, MEMTRACE_STACKS="none"))
    expect_ok(r, "thread_stress")
    snap = r.snapshot()
    n = r.out.counts["alloc"]
    counts = {a: len(snap.actions(a)) for a in ("alloc", "free_requested", "free_completed")}
    check(n == 3000 and counts == {"alloc": n, "free_requested": n, "free_completed": n},
          f"trace counts {counts}, the program made {n} allocations and freed them all")
    blocks = tiled_blocks(snap)
    check(all(b["state"] == "inactive" for b, _ in blocks.values()), "a block is still active at exit")
    ctx.check_snapshot_tool(snap.path)
    r = ctx.run([ctx.program("dump_signal"), "interval"], env=dict(CACHING, MEMTRACE_INTERVAL="0.1"))
    expect_ok(r)
    extra = r.on_demand_snapshots()
    check(extra, f"no snapshot was taken during the run\n{r.describe()}")
    for path in extra:
        snap = Snapshot(path)
        ctx.check_snapshot_tool(path)
        blocks = tiled_blocks(snap)
        check(any(b["state"] == "active_allocated" and b["size"] == 3 << 20 for b, _ in blocks.values()),
              f"{path}: the kept 3 MiB block is missing")
    print(f"  {len(extra)} snapshots during concurrent allocation, all consistent")

@case
def case_caching_context(ctx):
    """Context teardown (cuCtxDestroy, primary reset) in caching mode: the allocator of the context
    gives its segments back first, its blocks and segments leave the snapshot, and the memory of
    other families (VMM, pools) that outlives the context stays."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("fam_context")
    plain = ctx.run([prog], env={"MEMTRACE_STACKS": "none"})
    expect_ok(plain)
    r = ctx.run([prog], env=CACHING)
    expect_ok(r)
    check(plain.out.rcs == r.out.rcs, f"return codes differ\n  passthrough: {plain.out.rcs}\n  caching: {r.out.rcs}")
    snap = r.snapshot()
    check_caching_snapshot(snap, r.out)
    ctx.check_snapshot_tool(snap.path)
    check(len(snap.actions("segment_free")) >= 2, "the destroyed contexts' segments were not freed in the trace")

@case
def case_caching_bad_value(ctx):
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("route_direct")
    r = ctx.run([prog], env={"MEMTRACE_STACKS": "none", "MEMTRACE_ALLOCATOR": "cachy"})
    expect_ok(r)
    warns = r.warnings()
    check(len(warns) == 1 and "MEMTRACE_ALLOCATOR" in warns[0] and "passthrough" in warns[0],
          f"MEMTRACE_ALLOCATOR=cachy: expected one warning naming the variable and the default: {warns}")
    snap = r.snapshot()
    check_against_program(snap, r.out, exact=True, stacks=False)  # passthrough: one segment per allocation
    ctx.check_snapshot_tool(snap.path)
    r = ctx.run([prog], env={"MEMTRACE_STACKS": "none", "MEMTRACE_ALLOCATOR": "caching",
                             "MEMTRACE_ALLOC_CONF": "max_split_size_mb:64,no_such_key:3"})
    expect_ok(r)
    warns = r.warnings()
    check(len(warns) == 1 and "MEMTRACE_ALLOC_CONF" in warns[0] and "no_such_key" in warns[0],
          f"expected one warning about the unknown key: {warns}")
    snap = r.snapshot()
    check(snap.data["allocator_settings"]["max_split_size"] == 64 << 20, "the good part of the conf was lost")
    ctx.check_snapshot_tool(snap.path)
    print(f"  {warns[0]}")


# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# The state file: a process that dies without its exit snapshot (docs/state-file.md)
# --------------------------------------------------------------------------------------------

def live_run_env(ctx, extra=None):
    """A fresh run folder and the environment of a program started with Popen under memtrace (for
    cases that watch it while it runs): its snapshot and state file in that folder."""
    ctx.runs += 1
    outdir = os.path.join(ctx.tmp, f"run{ctx.runs:03d}")
    os.makedirs(outdir)
    e = ctx.base_env()
    first = os.environ.get("MEMTRACE_TEST_PRELOAD_FIRST")  # a sanitizer's runtime (scripts/test-sanitizers.sh)
    e.update({"LD_LIBRARY_PATH": ctx.sim, "LD_PRELOAD": (first + " " if first else "") + ctx.preload,
              "MEMTRACE_OUTPUT": os.path.join(outdir, "snapshot-%p.pickle"), "MEMTRACE_STATE_DIR": outdir + "-state"})
    e.update(extra or {})
    return outdir, e


def state_files(outdir):
    return sorted(glob.glob(os.path.join(outdir + "-state", "memtrace-*.state")))


def recover(ctx, state_file, out, expect_rc=0):
    p = subprocess.run([ctx.cli, "recover", state_file, "-o", out], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120, errors="replace")
    check(p.returncode == expect_rc, f"memtrace recover {state_file} exited {p.returncode}, expected {expect_rc}:\n"
                                     f"{p.stdout}{p.stderr}")
    return p


def live_device_set(snap):
    """(address, requested) of every active block of the snapshot."""
    out = {}
    for s in snap.segments:
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                out[b["address"]] = b["requested_size"]
    return out


def reported(stdout):
    """What the program said it holds: addr -> requested (ALLOC not followed by that thread's FREE),
    and the addresses it had started to free without saying it was done. Lines of one thread are
    in its order; a thread frees only what it allocated, so a FREE from another thread than the
    address's latest ALLOC is an older use of that address."""
    held, owner, freeing = {}, {}, set()
    for line in stdout.splitlines():
        f = line.split()
        if len(f) < 3 or f[1] != "dev":
            continue
        t = f[-1] if f[-1].startswith("T") else None
        a = int(f[2], 16)
        if f[0] == "ALLOC" and len(f) >= 4:
            held[a], owner[a] = int(f[3]), t
        elif f[0] == "FREEING" and owner.get(a) == t:
            freeing.add(a)
        elif f[0] == "FREE" and owner.get(a) == t:
            held.pop(a, None)
            owner.pop(a, None)
            freeing.discard(a)
    return held, freeing


def recovered_and_checked(ctx, r, expect_live, freeing=frozenset(), in_flight=0, signame=None):
    """The run's state file gives a snapshot whose live set is expect_live, apart from frees the
    program had started (freeing) and at most in_flight allocations it had not reported yet; every
    memtrace command and checker opens it."""
    files = state_files(r.outdir)
    check(len(files) == 1, f"expected one state file, found {files}\n{r.describe()}")
    out = os.path.join(r.outdir, "recovered.pickle")
    p = recover(ctx, files[0], out)
    check("recovered the snapshot" in p.stderr and out in p.stderr, f"recover did not say where:\n{p.stderr}")
    if signame:
        check(f"ended by {signame}" in p.stderr, f"recover does not say the process ended by {signame}:\n{p.stderr}")
    snap = Snapshot(out)
    live = live_device_set(snap)
    missing = {a for a in expect_live if a not in live}
    # An address the program had started to free may already be another thread's newer allocation,
    # one that thread had not reported yet: an in-flight call too, with its own size.
    reused = {a for a in live if a in expect_live and a in freeing and live[a] != expect_live[a]}
    extra = {a for a in live if a not in expect_live} | reused
    check(missing <= set(freeing), f"recovered live set lacks {len(missing - set(freeing))} reported allocations "
                                   f"(e.g. {[hex(a) for a in sorted(missing - set(freeing))[:4]]})")
    check(len(extra) <= in_flight, f"recovered live set has {len(extra)} allocations the program never reported "
                                   f"(at most {in_flight} calls were in flight)")
    for a in live:
        if a in expect_live and a not in reused:
            check(live[a] == expect_live[a], f"block {hex(a)}: {live[a]} bytes recovered, {expect_live[a]} reported")
    check(snap.data["allocator_settings"]["memtrace"]["reason"] == "recover", "the snapshot's reason is not 'recover'")
    ctx.check_snapshot_tool(out)
    for cmd in (["summary", out], ["leaks", out], ["peak", out]):
        q = subprocess.run([ctx.cli] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        check(q.returncode == 0, f"memtrace {' '.join(cmd)} exited {q.returncode}:\n{q.stderr}")
    viz = os.path.join(ctx.build, "memory_viz", "_memory_viz.py")
    if os.path.isfile(viz):
        q = subprocess.run([sys.executable, viz, "stats", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        check(q.returncode == 0, f"_memory_viz.py stats exited {q.returncode}:\n{q.stderr[-2000:]}")
    return snap, live


@case
def case_state_kill_threads(ctx):
    """SIGKILL while 8 threads allocate and free: the recovered live set is what the program had
    reported, give or take the one call each thread had in flight."""
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")
    outdir, e = live_run_env(ctx, {"MEMTRACE_MAX_ENTRIES": "20000"})
    p = subprocess.Popen([prog, "threads"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace")
    lines, allocs = [], 0
    deadline = time.monotonic() + 120
    # Long enough for the ring (20,000 entries) to wrap several times.
    while allocs < 30000 and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        allocs += line.startswith("ALLOC")
    p.kill()
    p.wait(timeout=60)
    # The rest through the same text stream: communicate() would read the pipe itself and lose
    # what the stream has buffered already.
    rest, err = p.stdout.read(), p.stderr.read()
    check(p.returncode == -signal.SIGKILL, f"the program exited {p.returncode}, not by SIGKILL:\n{err[-2000:]}")
    check(allocs >= 30000, f"only {allocs} allocations reported before the deadline:\n{err[-2000:]}")
    stdout = "".join(lines) + rest
    held, freeing = reported(stdout)

    class R:  # what recovered_and_checked reads of a run
        pass
    r = R()
    r.outdir, r.describe = outdir, (lambda: f"  stderr:\n{err[-3000:]}")
    check(not glob.glob(os.path.join(outdir, "*.pickle")), "a killed process wrote a snapshot")
    recovered_and_checked(ctx, r, held, freeing, in_flight=8)


def death_case(ctx, mode, expect_rc, signame=None, env=None):
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")
    plain = ctx.run([prog, mode], preload=False)
    check(plain.rc == expect_rc, f"without memtrace '{mode}' exits {plain.rc}, expected {expect_rc}")
    r = ctx.run([prog, mode], env=env)
    check(r.rc == expect_rc, f"under memtrace '{mode}' exits {r.rc}, expected {expect_rc}\n{r.describe()}")
    check(("HANDLED" in r.stdout) == ("HANDLED" in plain.stdout), "the program's own handler ran differently")
    check("SURVIVED" not in r.stdout, "the program went on after its own end")
    held, _ = reported(r.stdout)
    check(len(held) == 3, f"the program reported {len(held)} live allocations, expected 3")
    recovered_and_checked(ctx, r, held, signame=signame)


@case
def case_state_segv(ctx):
    death_case(ctx, "segv", -signal.SIGSEGV, "SIGSEGV")


@case
def case_state_abort(ctx):
    death_case(ctx, "abort", -signal.SIGABRT, "SIGABRT")


@case
def case_state_term(ctx):
    death_case(ctx, "term", -signal.SIGTERM, "SIGTERM")


@case
def case_state_term_handler(ctx):
    """The program's own SIGTERM handler runs (memtrace chains to it) and decides the exit status."""
    death_case(ctx, "term_handler", 3, "SIGTERM")


@case
def case_state_exit(ctx):
    death_case(ctx, "exit", 5)


@case
def case_state_clean_exit(ctx):
    """A program that ends normally leaves no state file, and a bad MEMTRACE_STATE_DIR costs one
    warning and nothing else."""
    ctx.need_preload()
    ctx.need_sim()
    prog = ctx.program("exit_frees")
    r = ctx.run([prog])
    expect_ok(r)
    check(not state_files(r.outdir), f"a clean exit left {state_files(r.outdir)}")
    check(os.path.isdir(r.outdir + "-state"), "the state folder was never made")
    blocker = os.path.join(ctx.tmp, "not-a-folder")
    with open(blocker, "w") as f:
        f.write("x")
    for bad in (blocker, os.path.join(blocker, "sub")):
        r = ctx.run([prog], env={"MEMTRACE_STATE_DIR": bad})
        expect_ok(r)
        warns = [w for w in r.warnings() if "state file" in w]
        check(len(warns) == 1, f"MEMTRACE_STATE_DIR={bad}: expected one warning, got {r.warnings()}")
        r.snapshot()  # recording went on
    r = ctx.run([prog], env={"MEMTRACE_STATE_DIR": "off"})
    expect_ok(r)
    check(not r.warnings(), f"MEMTRACE_STATE_DIR=off warned: {r.warnings()}")
    # A ring too large to reserve in a file: one warning, and the run as without a state file.
    r = ctx.run([prog], env={"MEMTRACE_MAX_ENTRIES": "100000000"})
    expect_ok(r)
    warns = [w for w in r.warnings() if "state file" in w]
    check(len(warns) == 1 and "2048 MiB" in warns[0], f"MEMTRACE_MAX_ENTRIES=100000000: {r.warnings()}")
    check(not state_files(r.outdir), "a state file was made anyway")
    r.snapshot()
    # The default folder: $XDG_RUNTIME_DIR/memtrace, made 0700; another user's or an open one is
    # refused, and the next default is taken.
    xdg = os.path.join(ctx.tmp, "xdg")
    os.makedirs(xdg)
    r = ctx.run([ctx.program("state_death"), "exit"], env={"MEMTRACE_STATE_DIR": None, "XDG_RUNTIME_DIR": xdg})
    files = glob.glob(os.path.join(xdg, "memtrace", "memtrace-*.state"))
    check(r.rc == 5 and len(files) == 1, f"no state file in $XDG_RUNTIME_DIR/memtrace: {files}\n{r.describe()}")
    check(stat.S_IMODE(os.stat(os.path.join(xdg, "memtrace")).st_mode) == 0o700, "the default folder is not 0700")
    check(stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600, "the state file is not 0600")
    os.unlink(files[0])
    os.chmod(os.path.join(xdg, "memtrace"), 0o755)
    r = ctx.run([prog], env={"MEMTRACE_STATE_DIR": None, "XDG_RUNTIME_DIR": xdg})
    expect_ok(r)
    check(not glob.glob(os.path.join(xdg, "memtrace", "*")), "a folder open to others was used")


@case
def case_state_bad_input(ctx):
    """recover refuses another version, a truncated file, another user's file, and a file that is
    not a state file: one line, exit status 2, nothing written."""
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")
    r = ctx.run([prog, "exit"])
    files = state_files(r.outdir)
    check(len(files) == 1, f"no state file to spoil: {files}\n{r.describe()}")
    with open(files[0], "rb") as f:
        good = f.read()
    bad = {}
    bad["version"] = good[:8] + (99).to_bytes(4, "little") + good[12:]
    bad["truncated"] = good[: len(good) // 2]
    bad["short"] = good[:100]
    bad["not_state"] = b"hello" * 1000
    for name, data in bad.items():
        path = os.path.join(ctx.tmp, f"{name}.state")
        with open(path, "wb") as f:
            f.write(data)
        out = os.path.join(ctx.tmp, f"{name}.pickle")
        p = recover(ctx, path, out, expect_rc=2)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        check(len(lines) == 1, f"{name}: expected one line, got {p.stderr!r}")
        check(not os.path.exists(out) and not glob.glob(out + "*"), f"{name}: recover left {out}")
    check("version 99" in recover(ctx, os.path.join(ctx.tmp, "version.state"), "/dev/null/x", 2).stderr,
          "the version is not named")
    check("truncated" in recover(ctx, os.path.join(ctx.tmp, "truncated.state"), "/dev/null/x", 2).stderr,
          "a truncated file is not called truncated")
    if os.getuid() == 0:
        other = os.path.join(ctx.tmp, "other.state")
        with open(other, "wb") as f:
            f.write(good)
        os.chown(other, 12345, 12345)
        p = recover(ctx, other, os.path.join(ctx.tmp, "other.pickle"), expect_rc=2)
        check("another user" in p.stderr, f"another user's file: {p.stderr}")
    else:
        other = "/proc/1/environ"  # a file that is root's; must be refused before it is read
        p = recover(ctx, "/etc/hostname" if os.path.exists("/etc/hostname") else other,
                    os.path.join(ctx.tmp, "other.pickle"), expect_rc=2)
        check("another user" in p.stderr, f"another user's file: {p.stderr}")


@case
def case_state_run_recovers(ctx):
    """memtrace run: a program that dies by a signal keeps its exit status, and run recovers its
    snapshot from the state file by itself and says where it is."""
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")
    for mode, rc, sig in (("segv", -signal.SIGSEGV, "SIGSEGV"), ("exit", 5, None)):
        r = ctx.run([ctx.cli, "run", "--sim", "--", prog, mode], preload=False,
                    env={"MEMTRACE_OUTPUT": os.path.join(ctx.tmp, f"run-{mode}-%p.pickle"),
                         "MEMTRACE_STATE_DIR": os.path.join(ctx.tmp, "run-state")}, timeout=120)
        check(r.rc == rc, f"memtrace run of '{mode}' exits {r.rc}, expected {rc}\n{r.describe()}")
        lines = [l for l in r.stderr.splitlines() if "recovered the snapshot" in l]
        check(len(lines) == 1, f"run did not say it recovered the snapshot\n{r.describe()}")
        if sig:
            check(f"ended by {sig}" in lines[0], f"no word of {sig}: {lines[0]}")
        path = lines[0].split(": ", 2)[-1].split(" (")[0]
        check(os.path.isfile(path), f"the snapshot {path} it names is not there")
        snap = Snapshot(path)
        held, _ = reported(r.stdout)
        check(set(live_device_set(snap)) == set(held), f"'{mode}': recovered {sorted(live_device_set(snap))}, "
                                                       f"the program held {sorted(held)}")
        os.unlink(path)
    # A clean exit: the exit snapshot as before, nothing recovered.
    r = ctx.run([ctx.cli, "run", "--sim", "--", ctx.program("exit_frees")], preload=False,
                env={"MEMTRACE_OUTPUT": os.path.join(ctx.tmp, "run-clean-%p.pickle"),
                     "MEMTRACE_STATE_DIR": os.path.join(ctx.tmp, "run-state")}, timeout=120)
    check(r.rc == 0 and "recovered" not in r.stderr, f"a clean run recovered something\n{r.describe()}")
    check(not glob.glob(os.path.join(ctx.tmp, "run-state", "*.state")), "state files were left behind")


def top_interactive(ctx, pid, state_dir):
    """`memtrace top PID` on a terminal: it redraws each second until q is pressed, then exits 0 and
    leaves the terminal's echo and line mode as it found them."""
    import pty
    import termios
    env = {**ctx.base_env(), "MEMTRACE_STATE_DIR": state_dir}
    child, fd = pty.fork()
    if child == 0:
        try:
            os.execve(ctx.cli, [ctx.cli, "top", str(pid)], env)
        finally:
            os._exit(127)
    before = termios.ECHO | termios.ICANON  # a new terminal's, which top may have changed already
    out = b""
    deadline = time.monotonic() + 60
    try:
        while out.count(b"(q quits)") < 2 and time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        text = out.decode(errors="replace")
        check(text.count("(q quits)") >= 2 and f"pid {pid}" in text and "state_death" in text,
              f"top on a terminal did not redraw its frame:\n{text[-2000:]}")
        check(termios.tcgetattr(fd)[3] & (termios.ECHO | termios.ICANON) == 0,
              "top on a terminal did not turn off echo and line mode to read q")
        os.write(fd, b"q")
        status = None
        while status is None and time.monotonic() < deadline:
            done, st = os.waitpid(child, os.WNOHANG)
            if done:
                status = st
            else:
                try:  # keep draining so top never blocks on a full terminal
                    os.read(fd, 65536)
                except OSError:
                    time.sleep(0.05)
        check(status is not None, "top did not quit on q within 60 s")
        check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"top quit on q with status {status:#x}")
        after = termios.tcgetattr(fd)[3] & (termios.ECHO | termios.ICANON)
        check(after == before, f"top left the terminal's modes changed ({before:#x} before, {after:#x} after)")
    finally:
        try:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


@case
def case_state_top(ctx):
    """memtrace top --once and --json against a program that holds 8 MiB on device 0 and blocks on
    its stdin while top looks: the bytes, the peak, the call sites; a PID that is not under
    memtrace, and one that does not exist: one line, exit status 2."""
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")
    outdir, e = live_run_env(ctx)
    state_dir = outdir + "-state"
    p = subprocess.Popen([prog, "hold"], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("READY"):
                break
        check(lines and lines[-1].startswith("READY"), f"the program did not get ready: {lines}")
        held, _ = reported("".join(lines))
        held_bytes = sum(held.values())
        check(held_bytes == 8 << 20, f"the program says it holds {held_bytes} bytes")

        def top(*args, env=None):
            return subprocess.run([ctx.cli, "top", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=60, errors="replace", stdin=subprocess.DEVNULL,
                                  env=env or {**ctx.base_env(), "MEMTRACE_STATE_DIR": state_dir})

        t = top("--json", str(p.pid))
        check(t.returncode == 0, f"top --json exited {t.returncode}: {t.stderr}")
        doc = json.loads(t.stdout)
        procs = doc["processes"]
        check(len(procs) == 1 and procs[0]["pid"] == p.pid, f"top --json names {procs}")
        dev = [d for d in procs[0]["devices"] if d["device"] == 0]
        check(dev and dev[0]["allocated"] == held_bytes, f"device 0 allocated: {dev}")
        check(dev[0]["allocated_peak"] == 10 << 20, f"device 0 peak (four blocks 1..4 MiB): {dev}")
        check(sum(o["bytes"] for o in dev[0]["owners"]) == held_bytes, f"owners' bytes: {dev[0]['owners']}")
        # Owners by the names the process gave them (the program's own name here), not by number.
        check([o["owner"] for o in dev[0]["owners"]] == ["state_death"], f"owners' names: {dev[0]['owners']}")
        check(sum(s["bytes"] for s in dev[0]["sites"]) == held_bytes and
              all(s["top_frame"] != "(no stack)" for s in dev[0]["sites"]), f"call sites: {dev[0]['sites']}")
        # Named by function and line (the four allocations are on one line of main).
        check(all(re.fullmatch(r"main \(state_death\.c:\d+\)", s["function"]) for s in dev[0]["sites"]),
              f"call sites' names: {dev[0]['sites']}")
        check(procs[0]["events_per_s"] == 0, f"a process that blocks has events: {procs[0]}")
        # Without a PID: every process found in the state folder (the top's own MEMTRACE_STATE_DIR),
        # and the named PID's own MEMTRACE_STATE_DIR is found through its environment.
        for args, env in ((["--once"], None), (["--once", str(p.pid)], {**ctx.base_env(), "MEMTRACE_STATE_DIR": "off"})):
            t = top(*args, env=env)
            check(t.returncode == 0 and f"pid {p.pid}" in t.stdout and "8.00 MiB" in t.stdout and
                  re.search(r"^\s+state_death\s+8\.00 MiB\s+100\.0%$", t.stdout, re.M) and
                  re.search(r"blocks  main \(state_death\.c:\d+\)$", t.stdout, re.M),
                  f"top {args} exited {t.returncode}:\n{t.stdout}{t.stderr}")
        top_interactive(ctx, p.pid, state_dir)
        # A live process not under memtrace (this one), one that does not exist.
        for pid, words in ((os.getpid(), "not running under memtrace"), (4194304 + 7, "no process")):
            t = top("--once", str(pid))
            err = [l for l in t.stderr.splitlines() if l.strip()]
            check(t.returncode == 2 and len(err) == 1 and words in err[0] and not t.stdout,
                  f"top {pid}: exit {t.returncode}, stderr {t.stderr!r}, stdout {t.stdout!r}")
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    check(p.returncode == 0, f"the program exited {p.returncode}: {p.stderr.read()[-2000:]}")
    check(not state_files(outdir), "the state file stayed after a clean exit")


@case
def case_state_snap(ctx):
    """memtrace snap PID while 8 threads of the program allocate flat out: the path of a complete
    snapshot (the program's own, and the -o copy), twice; a process whose MEMTRACE_SIGNAL is none or
    would end it; one whose file is still being made (waited for within --timeout); PIDs not under
    memtrace (one line, exit status 2)."""
    ctx.need_preload()
    ctx.need_sim()
    ctx.need_cli()
    prog = ctx.program("state_death")

    def snap(*args):
        return subprocess.run([ctx.cli, "snap", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120, errors="replace", stdin=subprocess.DEVNULL, env=ctx.base_env())

    def started(p, outdir):
        deadline = time.monotonic() + 60  # a guard against a program that never starts, not a pace
        while not state_files(outdir) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return bool(state_files(outdir))

    outdir, e = live_run_env(ctx)
    p = subprocess.Popen([prog, "threads"], env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace")
    # The state file is made before the threads start: a snapshot is asked for once one of them
    # has said ALLOC (a drained pipe, so the threads never block on it).
    allocated = threading.Event()

    def drain():
        for line in p.stdout:
            if line.startswith("ALLOC"):
                allocated.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        check(started(p, outdir), "the program never made its state file")
        check(allocated.wait(60), "the program's threads never allocated")
        seen = []
        for i in range(2):
            out = os.path.join(ctx.tmp, f"snap{i}.pickle")
            r = snap(str(p.pid), "-o", out)
            check(r.returncode == 0 and r.stdout.strip() == out, f"snap {i}: exit {r.returncode}, {r.stdout!r} {r.stderr!r}")
            if r.returncode != 0:
                continue
            s = Snapshot(out)
            allocs = [e for _, e in s.entries() if e["action"] == "alloc"]
            check(allocs, f"snap {i}: no alloc entry in {out}")
            seen.append(len(allocs))
            own = [f for f in glob.glob(os.path.join(outdir, "*.pickle"))]
            check(len(own) >= 1, f"snap {i}: the program's own snapshot is not in {outdir}: {own}")
        check(p.poll() is None, "the program ended while snap asked for snapshots")
    finally:
        p.kill()
        p.wait(timeout=60)
    # MEMTRACE_SIGNAL=none, and one whose default action ends the program: snap sends nothing.
    for sig, words in (("none", "takes no snapshot on a signal"), ("TERM", "ends the program")):
        outdir, e = live_run_env(ctx, {"MEMTRACE_SIGNAL": sig})
        p = subprocess.Popen([prog, "hold"], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace")
        try:
            for line in p.stdout:
                if line.startswith("READY"):
                    break
            r = snap(str(p.pid))
            err = [l for l in r.stderr.splitlines() if l.strip()]
            check(r.returncode == 1 and len(err) == 1 and words in err[0] and not r.stdout,
                  f"snap with MEMTRACE_SIGNAL={sig}: exit {r.returncode}, {r.stderr!r}")
            check(p.poll() is None, f"MEMTRACE_SIGNAL={sig}: the program ended")
        finally:
            p.stdin.close()
            p.wait(timeout=60)
    # A file named for a live process but not readable yet (one being made): snap waits for it
    # within --timeout, then says the process is not under memtrace.
    sd = os.path.join(ctx.tmp, "making-state")
    os.makedirs(sd)
    e = ctx.base_env()
    e["MEMTRACE_STATE_DIR"] = sd
    sl = subprocess.Popen(["sleep", "60"], env=e, stdin=subprocess.DEVNULL)
    try:
        open(os.path.join(sd, f"memtrace-{sl.pid}.state"), "wb").close()
        t0 = time.monotonic()
        r = snap(str(sl.pid), "--timeout", "0.5")
        waited = time.monotonic() - t0
        check(r.returncode == 2 and "not running under memtrace" in r.stderr and waited >= 0.5,
              f"snap of a process whose file is being made: exit {r.returncode} after {waited:.2f}s, {r.stderr!r}")
    finally:
        sl.kill()
        sl.wait(timeout=60)
    for pid, words in ((os.getpid(), "not running under memtrace"), (4194304 + 7, "no process")):
        r = snap(str(pid))
        err = [l for l in r.stderr.splitlines() if l.strip()]
        check(r.returncode == 2 and len(err) == 1 and words in err[0] and not r.stdout,
              f"snap {pid}: exit {r.returncode}, stderr {r.stderr!r}")
    r = snap()
    check(r.returncode == 2 and "usage: memtrace snap" in r.stderr, f"snap without a PID: {r.returncode} {r.stderr!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build-dir", default=os.path.join(here, "..", "..", "build"))
    ap.add_argument("--source-dir", default=os.path.join(here, "..", ".."))
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("case", nargs="?")
    args = ap.parse_args()
    if args.list or not args.case:
        print("\n".join(CASES))
        return 0
    fn = CASES.get(args.case)
    if fn is None:
        print(f"unknown case {args.case!r}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    ctx = Context(args.build_dir, args.source_dir, os.environ.get("MEMTRACE_TEST_KEEP") == "1")
    failed = False
    t0 = time.monotonic()
    try:
        fn(ctx)
        status = 0
        if ctx.checker_missing:
            print(f"SKIP: {args.case}: own checks passed, but {ctx.checker} does not exist yet")
            status = SKIP
        else:
            print(f"PASS: {args.case} ({ctx.runs} runs, {time.monotonic() - t0:.2f}s)")
        return status
    except Skip as s:
        print(f"SKIP: {args.case}: {s}")
        return SKIP
    except Failure as f:
        failed = True
        print(f"FAIL: {args.case}: {f}")
        return 1
    finally:
        ctx.cleanup(failed)


if __name__ == "__main__":
    sys.exit(main())
