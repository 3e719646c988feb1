"""Python frames in every shape the interpreter runs code: device memory allocated through ctypes
from nested functions, a method, a generator, a coroutine, a class body, a comprehension, a
threading.Thread, and a Python callback that C (libc's qsort) calls, each with the GIL released
(CDLL) and held (PyDLL). Runs on any CPython 3.11 or newer.

Prints the protocol of mt_case.h for each allocation, plus
    PYSTACK <label> <addr> <json: [[qualname, line, filename], ...] innermost first>
taken by the interpreter itself (sys._getframe) on the line that makes the call, which is what
the snapshot must show for that allocation's Python frames."""
import ctypes
import json
import sys
import threading

sys.stdout.reconfigure(line_buffering=True)

cuda = ctypes.CDLL("libcuda.so.1")        # releases the GIL around each call
cuda_gil = ctypes.PyDLL("libcuda.so.1")   # keeps it
for lib in (cuda, cuda_gil):
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemAlloc_v2.restype = ctypes.c_int

SIZE = 1 << 20
out_lock = threading.Lock()


def must(label, value):
    print(f"RC {label} {value}")
    if value != 0:
        print(f"STOP {label}")
        sys.exit(3)


def here():
    """The caller's Python stack as the interpreter sees it, innermost first."""
    f = sys._getframe(1)
    stack = []
    while f is not None:
        stack.append([f.f_code.co_qualname, f.f_lineno, f.f_code.co_filename])
        f = f.f_back
    return stack


def report(label, lib, ptr, stack, rc):
    with out_lock:
        must(label, rc)
        print(f"ALLOC dev {ptr.value:#x} {SIZE} {SIZE}")
        print(f"PYSTACK {label} {ptr.value:#x} {json.dumps(stack)}")


def allocate(label, lib):
    ptr = ctypes.c_uint64()
    stack = here(); rc = lib.cuMemAlloc_v2(ctypes.byref(ptr), SIZE)  # noqa: E702 (one line: one location)
    report(label, lib, ptr, stack, rc)


# nested functions
def inner(label, lib):
    allocate(label, lib)


def middle(label, lib):
    inner(label, lib)


def outer(label, lib):
    middle(label, lib)


# a method
class Model:
    def build(self, label, lib):
        allocate(label, lib)


# a generator, and a coroutine driven by hand
def weights(label, lib):
    for i in range(2):
        if i == 1:
            allocate(label, lib)
        yield i


async def load_async(label, lib):
    allocate(label, lib)


def run_coroutine(label, lib):
    c = load_async(label, lib)
    try:
        c.send(None)
    except StopIteration:
        pass


# a comprehension (inlined into its function from 3.12 on, a frame of its own before)
def comprehension(label, lib):
    return [allocate(label, lib) for _ in range(1)]


# a Python callback that C calls: two eval calls with libc's qsort between them
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def sort_with_callback(label, lib):
    done = []

    def compare(a, b):
        if not done:
            done.append(1)
            allocate(label, lib)
        return a[0] - b[0]

    libc = ctypes.CDLL(None)
    arr = (ctypes.c_int * 2)(2, 1)
    libc.qsort(arr, 2, ctypes.sizeof(ctypes.c_int), CMP(compare))


def thread_main(label, lib):
    cuda.cuCtxSetCurrent(ctx)  # a new thread has no current context
    outer(label, lib)


def in_thread(label, lib):
    t = threading.Thread(target=thread_main, args=(label, lib), name="loader")
    t.start()
    t.join()


must("cuInit", cuda.cuInit(0))
dev = ctypes.c_int()
must("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
must("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
cuda.cuCtxSetCurrent(ctx)

for suffix, lib in (("released", cuda), ("held", cuda_gil)):
    outer("nested-" + suffix, lib)
    Model().build("method-" + suffix, lib)
    for _ in weights("generator-" + suffix, lib):
        pass
    run_coroutine("coroutine-" + suffix, lib)
    comprehension("comprehension-" + suffix, lib)
    sort_with_callback("callback-" + suffix, lib)
    in_thread("thread-" + suffix, lib)


class Holder:
    allocate("classbody-released", cuda)


print("DONE")
