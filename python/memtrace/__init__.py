"""memtrace's Python module: mark phases, take a snapshot and read memory numbers from the program.

Pure Python (ctypes), no build step. It calls the memtrace_v1_* functions that libmemtrace.so
exports (include/memtrace/memtrace_v1.h), found among the process's own symbols. Without
libmemtrace.so in the process every call does nothing and reports it in ``last_status``: nothing
here raises because memtrace is missing, so a program runs the same with and without it.

    import memtrace
    with memtrace.range("forward"):
        loss = model(batch)
    memtrace.annotate("step 7 done")
    path = memtrace.dump()              # the configured name; dump("/tmp/x.pickle") for your own
    print(memtrace.memory_stats()["allocated_bytes.all.peak"])

``memtrace run`` puts this module's folder on the program's PYTHONPATH (appended, so a
``memtrace`` of the program's own comes first). docs/api.md describes every call.
"""
import builtins
import ctypes
import functools
import threading

__all__ = ["OK", "NOT_LOADED", "NOT_RECORDING", "INVALID_ARGUMENT", "NO_OPEN_RANGE", "WRITE_FAILED",
           "FINISHED", "ERROR", "last_status", "status_string", "is_loaded", "is_recording", "range",
           "annotate", "dump", "memory_stats"]

# memtrace_status (include/memtrace/memtrace.h)
OK = 0
NOT_LOADED = 1
NOT_RECORDING = 2
INVALID_ARGUMENT = 3
NO_OPEN_RANGE = 4
WRITE_FAILED = 5
FINISHED = 6
ERROR = 7

_STATUS_TEXT = {
    OK: "ok",
    NOT_LOADED: "memtrace is not loaded (libmemtrace.so is not preloaded)",
    NOT_RECORDING: "memtrace is loaded but this process is not recorded",
    INVALID_ARGUMENT: "invalid argument",
    NO_OPEN_RANGE: "no range is open on this thread",
    WRITE_FAILED: "the snapshot could not be written (memtrace's log says why)",
    FINISHED: "the exit snapshot is taken: no snapshot after it",
    ERROR: "memtrace failed",
}

#: The status of the last call made through this module (any thread): one of the constants above.
last_status = NOT_LOADED

_MAX_DEVICES = 64
_MAX_OWNERS = 256
_OWNER_NAME = 128
_PATH_MAX = 4096


class _Usage(ctypes.Structure):
    _fields_ = [("current", ctypes.c_uint64), ("peak", ctypes.c_uint64), ("allocations", ctypes.c_uint64)]


class _DeviceStats(ctypes.Structure):
    _fields_ = [("reserved", _Usage), ("allocated", _Usage)]


class _OwnerStats(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * _OWNER_NAME), ("device", _Usage)]


class _MemoryStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("device_count", ctypes.c_int32), ("owner_count", ctypes.c_int32),
                ("all_devices", _DeviceStats), ("device", _DeviceStats * _MAX_DEVICES),
                ("host_pinned", _Usage), ("owner", _OwnerStats * _MAX_OWNERS)]


def _bind():
    """The memtrace_v1_* functions when libmemtrace.so is in the process, else None."""
    try:
        process = ctypes.CDLL(None)
        names = ("recording", "range_push", "range_pop", "annotate", "dump", "memory_stats")
        fns = {n: getattr(process, "memtrace_v1_" + n) for n in names}
    except (OSError, AttributeError):
        return None
    for f in fns.values():
        f.restype = ctypes.c_int
    fns["recording"].argtypes = []
    fns["range_push"].argtypes = [ctypes.c_char_p]
    fns["range_pop"].argtypes = []
    fns["annotate"].argtypes = [ctypes.c_char_p]
    fns["dump"].argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    fns["memory_stats"].argtypes = [ctypes.c_void_p]
    return fns


_lib = _bind()


def _call(name, *args):
    global last_status
    last_status = _lib[name](*args) if _lib is not None else NOT_LOADED
    return last_status


def _text(value):
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")


def status_string(status):
    """An English phrase for a status code."""
    return _STATUS_TEXT.get(status, "unknown memtrace status")


def is_loaded():
    """True when libmemtrace.so is in this process."""
    return _lib is not None


def is_recording():
    """True when this process is recorded (memtrace loaded, and not turned off for it)."""
    return _call("recording") == OK


class range:  # noqa: A001 - the name the call reads best with: `with memtrace.range("forward"):`
    """A range on the calling thread, as NVTX's push/pop: allocations made inside carry its name.

    A context manager (``with memtrace.range("forward"):``) and a decorator (``@memtrace.range("step")``).
    The range is closed on the way out only if it was opened, so a program without memtrace and one
    with it run the same code.
    """

    def __init__(self, name):
        self.name = str(name)
        self._opened = threading.local()  # per thread: whether each nested entry opened its range

    def __enter__(self):
        stack = getattr(self._opened, "stack", None)
        if stack is None:
            stack = self._opened.stack = []
        stack.append(_call("range_push", _text(self.name)) == OK)
        return self

    def __exit__(self, *exc):
        if self._opened.stack.pop():
            _call("range_pop")
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def in_range(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return in_range

    def __repr__(self):
        return f"memtrace.range({self.name!r})"


def annotate(text):
    """A marker now: an 'annotate' entry with `text` in the snapshot's history. True when recorded."""
    return _call("annotate", _text(text)) == OK


def dump(path=None):
    """Writes a snapshot now and returns its path once the file is complete; None when none was
    written (``last_status`` says why). path None: the configured name (MEMTRACE_OUTPUT, numbered);
    otherwise exactly there."""
    written = ctypes.create_string_buffer(_PATH_MAX)
    arg = None if path is None else _text(path)
    if _call("dump", arg, written, _PATH_MAX) != OK:
        return None
    return written.value.decode("utf-8", "surrogateescape")


def _usage_keys(d, out):
    out["allocated_bytes.all.current"] = d.allocated.current
    out["allocated_bytes.all.peak"] = d.allocated.peak
    out["reserved_bytes.all.current"] = d.reserved.current
    out["reserved_bytes.all.peak"] = d.reserved.peak
    out["allocation.all.allocated"] = d.allocated.allocations
    out["segment.all.allocated"] = d.reserved.allocations
    return out


def memory_stats(device=None):
    """Memory numbers now, as a dict with torch.cuda.memory_stats()'s key names.

    device None: every device together under the top-level keys (their peak is the peak of the
    sum), and each device under ``"devices"`` (``{index: {...}}``); a device index: that device's
    keys only. Either way ``"pinned_host_bytes.current"``/``".peak"`` and ``"owners"`` (``{library:
    {"current", "peak", "allocations"}}``, device bytes, the owners that ever held some). An empty
    dict when memtrace is not loaded or not recording.
    """
    stats = _MemoryStats()
    stats.size = ctypes.sizeof(_MemoryStats)
    if _call("memory_stats", ctypes.byref(stats)) != OK:
        return {}
    out = {}
    if device is None:
        _usage_keys(stats.all_devices, out)
        out["devices"] = {d: _usage_keys(stats.device[d], {}) for d in builtins.range(stats.device_count)}
    else:
        d = int(device)
        if d < 0 or d >= _MAX_DEVICES:
            raise ValueError(f"memtrace.memory_stats: device {device} is not in 0..{_MAX_DEVICES - 1}")
        _usage_keys(stats.device[d], out)
    out["pinned_host_bytes.current"] = stats.host_pinned.current
    out["pinned_host_bytes.peak"] = stats.host_pinned.peak
    out["pinned_host_allocation.allocated"] = stats.host_pinned.allocations
    owners = {}
    for i in builtins.range(stats.owner_count):
        o = stats.owner[i]
        if o.device.peak == 0:
            continue
        owners[o.name.decode("utf-8", "replace")] = {
            "current": o.device.current, "peak": o.device.peak, "allocations": o.device.allocations}
    out["owners"] = owners
    return out

