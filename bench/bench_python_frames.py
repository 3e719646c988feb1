#!/usr/bin/env python3
"""Cost of Python frames per hooked allocation, on every CPython this machine has (3.11 the one
running this script, 3.12 from pyenv or /usr/bin, 3.13 and 3.14 unpacked under BUILD_DIR/pythons by
scripts/fetch-pythons.sh): a Python loop 12 frames deep allocating and freeing through ctypes
with the GIL released (as PyTorch's operators do) on the simulated device, under memtrace with
MEMTRACE_PYTHON=off, gil (nothing to read: the GIL is released) and auto (frames read directly),
and without memtrace. The modes run interleaved, 5 rounds, each round's figure is its quietest of 10 batches, and the median
of the rounds is printed with the added cost of reading Python frames (auto - off), whose target is under 1 us per pair.

    python3 bench/bench_python_frames.py [BUILD_DIR]
"""
import os
import statistics
import subprocess
import sys

CHILD = r'''
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
cuda.cuInit(0); dev = ctypes.c_int(); cuda.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p(); cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
alloc, free, p = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2, ctypes.c_uint64()
ref = ctypes.byref(p)
def loop(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        alloc(ref, 4096); free(p.value)
    return time.perf_counter_ns() - t
def deep(d, n):
    return deep(d - 1, n) if d else loop(n)
deep(10, 20000)
n = 20000
print(min(deep(10, n) for _ in range(10)) / n)  # the quietest of 10 batches: the machine is shared
'''


def interpreters(build):
    """(version, argv prefix, extra library path) for each interpreter found."""
    import glob
    import shutil
    found = [("%d.%d" % sys.version_info[:2], [sys.executable], None)]
    for v in ("3.12",):
        c = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}.*/bin/python{v}"))) + [shutil.which(f"python{v}") or ""]
        c = [x for x in c if x]
        if c:
            found.append((v, [c[0]], None))
    for v in ("3.13", "3.14"):
        launch = os.path.join(build, "pythons", v, "launch")
        if os.path.isfile(launch):
            words = [w for w in open(launch).read().split("\n") if w]
            found.append((v, words, words[2]))
    return found


def run(build, interp, env_extra):
    _, argv, libdir = interp
    sim = os.path.join(build, "lib", "memtrace", "sim")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = sim
    env.update(env_extra)
    if libdir:  # Debian's interpreters run through their own loader: the path goes on its command line
        argv = list(argv)
        argv[2] = libdir + ":" + sim
    out = subprocess.run(argv + ["-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    lib = os.path.join(build, "lib", "libmemtrace.so")
    common = {"LD_PRELOAD": lib, "MEMTRACE_SUMMARY": "0", "MEMTRACE_OUTPUT": "/dev/null/none",
              "MEMTRACE_MAX_ENTRIES": "0"}
    modes = [("no memtrace", {}),
             ("memtrace, MEMTRACE_PYTHON=off", dict(common, MEMTRACE_PYTHON="off")),
             ("memtrace, MEMTRACE_PYTHON=gil", dict(common, MEMTRACE_PYTHON="gil")),
             ("memtrace, MEMTRACE_PYTHON=auto", dict(common, MEMTRACE_PYTHON="auto"))]
    load = os.getloadavg()
    print(f"12 Python frames deep, ctypes with the GIL released, 4 KiB alloc+free; {os.cpu_count()} CPUs, "
          f"load average {load[0]:.2f} at start; each figure the median over 5 interleaved rounds of the quietest of 10 batches")
    for interp in interpreters(build):
        rounds = {name: [] for name, _ in modes}
        for _ in range(5):
            for name, env in modes:
                rounds[name].append(run(build, interp, env))
        med = {name: statistics.median(v) for name, v in rounds.items()}
        print(f"CPython {interp[0]}")
        base = med["no memtrace"]
        for name, _ in modes:
            print(f"  {name:34s} {med[name]:8.0f} ns/pair   (+{med[name] - base:.0f})")
        print(f"  reading 12 Python frames (auto - off): {med['memtrace, MEMTRACE_PYTHON=auto'] - med['memtrace, MEMTRACE_PYTHON=off']:.0f} ns/pair")


if __name__ == "__main__":
    main()
