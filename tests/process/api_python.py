"""The Python module memtrace (python/memtrace) in a program that allocates through ctypes on the
simulated device. Run by run_case.py (cases api_python, api_python_unloaded) with and without
libmemtrace.so preloaded; prints the protocol of mt_case.h, plus
    STATUS <label> <memtrace status>   STAT <name> <value>   DUMPED <label> <path or ->
usage: api_python.py EXPLICIT_PATH"""
import ctypes
import json
import sys
import threading

import memtrace

sys.stdout.reconfigure(line_buffering=True)


def status(label):
    print(f"STATUS {label} {memtrace.last_status}")


cuda = ctypes.CDLL("libcuda.so.1")
for call, args in (("cuInit", (0,)),):
    if getattr(cuda, call)(*args) != 0:
        print(f"STOP {call}")
        sys.exit(3)
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
if cuda.cuDeviceGet(ctypes.byref(dev), 0) or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) \
        or cuda.cuCtxSetCurrent(ctx):
    print("STOP setup")
    sys.exit(3)
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]


def alloc(label, size):
    p = ctypes.c_uint64()
    rc = cuda.cuMemAlloc_v2(ctypes.byref(p), size)
    print(f"RC {label} {rc}")
    if rc == 0:
        print(f"ALLOC dev {hex(p.value)} {size} {size}")
        print(f"LABEL {label} {hex(p.value)}")
    return p.value


print(f"STAT loaded {int(memtrace.is_loaded())}")
print(f"STAT recording {int(memtrace.is_recording())}")
status("recording")

with memtrace.range("forward"):
    status("enter_forward")
    with memtrace.range("block.3"):
        alloc("in_block", 1 << 20)
    alloc("in_forward", 65536)


@memtrace.range("optimizer_step")
def step(size):
    return alloc("in_step", size)


step(4096)
status("decorated")


def worker():
    # Another thread's ranges are its own: this allocation carries only "worker".
    cuda.cuCtxSetCurrent(ctx)
    with memtrace.range("worker"):
        alloc("in_worker", 8192)


t = threading.Thread(target=worker)
t.start()
t.join()
alloc("outside", 3000)
try:
    with memtrace.range("raises"):
        raise KeyError("inside")
except KeyError:
    pass
alloc("after_raise", 2048)

print(f"STAT annotate {int(memtrace.annotate('checkpoint'))}")
status("annotate")

stats = memtrace.memory_stats()
status("memory_stats")
print("STATS " + json.dumps(stats, sort_keys=True))
print("STATS0 " + json.dumps(memtrace.memory_stats(0), sort_keys=True))

explicit = memtrace.dump(sys.argv[1])
status("dump_explicit")
print(f"DUMPED explicit {explicit or '-'}")
default = memtrace.dump()
status("dump_default")
print(f"DUMPED default {default or '-'}")
unwritable = memtrace.dump(sys.argv[1] + "/not/a/dir/x.pickle")
status("dump_unwritable")
print(f"DUMPED unwritable {unwritable or '-'}")
print("DONE")
