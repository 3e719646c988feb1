#!/usr/bin/env python3
"""Cost of Python frames per hooked allocation: a Python loop 12 frames deep allocating and freeing
through ctypes (GIL released, as PyTorch's operators do) on the simulated device, under memtrace
with MEMTRACE_PYTHON=off, gil (nothing to read: the GIL is released) and auto (frames read from the
3.11 frame chain), and without memtrace. Prints ns per alloc+free pair, median of 5 runs.

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
deep(10, 2000)
n = 40000
print(deep(10, n) / n)
'''


def run(build, env_extra):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "lib", "memtrace", "sim")
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
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
    print(f"Python {sys.version.split()[0]}, 12 Python frames deep, ctypes with the GIL released, 4 KiB alloc+free")
    base = None
    for name, env in modes:
        ns = statistics.median(run(build, env) for _ in range(5))
        base = ns if base is None else base
        print(f"  {name:34s} {ns:8.0f} ns/pair   (+{ns - base:.0f})")


if __name__ == "__main__":
    main()
