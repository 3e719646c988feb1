"""Route: Python ctypes loads libcuda.so.1 and calls cuMemAlloc_v2/cuMemFree_v2 by name
(ctypes resolves them with dlsym). Prints the same protocol as the C programs (mt_case.h)."""
import ctypes
import os
import sys

sys.stdout.reconfigure(line_buffering=True)


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def sym(label, fn):
    addr = ctypes.cast(fn, ctypes.c_void_p).value
    libc = ctypes.CDLL(None)
    info = DlInfo()
    module = name = "-"
    if addr and libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)):
        module = os.path.basename(info.dli_fname.decode()) if info.dli_fname else "-"
        if info.dli_sname and info.dli_saddr == addr:
            name = info.dli_sname.decode()
    print(f"SYM {label} {hex(addr or 0)} {module} {name}")


def rc(label, value):
    print(f"RC {label} {value}")
    return value


def must(label, value):
    if rc(label, value) != 0:
        print(f"STOP {label}")
        sys.exit(3)


cuda = ctypes.CDLL("libcuda.so.1")
sym("cuMemAlloc_v2", cuda.cuMemAlloc_v2)
sym("cuDeviceGet", cuda.cuDeviceGet)
must("cuInit", cuda.cuInit(0))
dev = ctypes.c_int()
must("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
must("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
must("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))

cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
ptrs = []
for i, size in enumerate((1 << 20, 12345, 256 << 10)):
    p = ctypes.c_uint64()
    if rc(f"alloc_{i}", cuda.cuMemAlloc_v2(ctypes.byref(p), size)) == 0:
        print(f"ALLOC dev {hex(p.value)} {size} {size}")
        ptrs.append(p.value)
if ptrs and rc("free_0", cuda.cuMemFree_v2(ptrs[0])) == 0:
    print(f"FREE dev {hex(ptrs[0])}")
print("DONE")
