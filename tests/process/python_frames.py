"""Python frames: device memory allocated from two known Python call paths, through ctypes with
the GIL released (CDLL) and held (PyDLL). Prints the protocol of mt_case.h plus one PYLINE per
allocation: the file, function and line the snapshot must show."""
import ctypes
import inspect
import sys

sys.stdout.reconfigure(line_buffering=True)

cuda = ctypes.CDLL("libcuda.so.1")           # releases the GIL around each call
cuda_gil = ctypes.PyDLL("libcuda.so.1")      # keeps it
for lib in (cuda, cuda_gil):
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]


def must(label, value):
    print(f"RC {label} {value}")
    if value != 0:
        print(f"STOP {label}")
        sys.exit(3)


def alloc_weights(lib, size, label):
    ptr = ctypes.c_uint64()
    line = inspect.currentframe().f_lineno + 1
    must(label, lib.cuMemAlloc_v2(ctypes.byref(ptr), size))
    print(f"ALLOC dev {ptr.value:#x} {size} {size}")
    print(f"PYLINE {label} {ptr.value:#x} {line}")
    return ptr.value


class Model:
    def build(self, lib, label):
        return alloc_weights(lib, 3 << 20, label)


def load_model_released():
    return Model().build(cuda, "released")


def load_model_held():
    return Model().build(cuda_gil, "held")


must("cuInit", cuda.cuInit(0))
dev = ctypes.c_int()
must("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
must("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
load_model_released()
load_model_held()
print("DONE")
