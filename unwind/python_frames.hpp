// Python frames of the calling thread, for programs that run in CPython (PyTorch, CuPy, JAX,
// ctypes scripts). They are stored in the same stack table as native return addresses, as
// tagged pseudo-addresses (bit 63 set: no user-space code lives there), so a stack that mixes
// native and Python frames is still one interned sequence and needs no second table.
//
// Two ways to read the frames, both without running Python code and without taking the GIL
// (taking it inside a hooked cudaMalloc can deadlock: PyTorch calls cudaMalloc with its
// allocator mutex held and the GIL released, while another thread holds the GIL and waits for
// that mutex):
//  - directly (CPython 3.11 to 3.14, default builds; MEMTRACE_PYTHON=auto): this thread's own
//    frame chain, whether or not it holds the GIL. Its frames cannot change while the thread is
//    inside our hook. The layout comes from a checked table (3.11, 3.12) or from the
//    interpreter's own _Py_DebugOffsets (3.13+), and every read is validated
//    (readable_memory.hpp), so a torn chain costs that stack its Python frames, never the program;
//  - through the public C API when the thread holds the GIL (other versions, free-threaded
//    builds, MEMTRACE_PYTHON=gil).
// docs/python-frames.md says what is read, from where, and why it is safe.
// Function names and file names are copied once per code object, when first seen.
#pragma once
#include <cstdint>
#include <string_view>

namespace memtrace::unwind {

constexpr uintptr_t kPythonFrameTag = uintptr_t{1} << 63;
inline bool is_python_frame(uintptr_t pc) { return (pc & kPythonFrameTag) != 0; }

struct PythonFrameInfo {
  std::string_view filename;  // co_filename
  std::string_view name;      // co_qualname (co_name before 3.11)
  int line = 0;               // 0 when unknown
};

// Writes this thread's Python frames, innermost first, as tagged addresses; returns how many
// (0 when the process runs no Python, the thread has no Python state, or the version is not
// readable without the GIL and the GIL is not held). Allocation-free except the first time a
// code object is seen.
int capture_python(uintptr_t* out, int max_frames);

// Whether this process runs CPython (looked up once; looked again now and then while absent,
// in case an embedding program loads libpython later). One load when known.
bool python_present();

// Replaces the interpreter's native frames in pcs[0..n) (return addresses, innermost first) by
// the Python frames they run, in place: each run of interpreter frames gets the Python frames of
// the eval calls it holds, native frames between them (C extensions, PyTorch's C++) stay where
// they are, and what lies outside the outermost run (libc's start of the process or thread) is
// dropped. Returns the new count (at most max_out; pcs must hold max_out entries). Unchanged
// when the stack does not pass through the interpreter or its Python frames cannot be read.
int splice_python_frames(uintptr_t* pcs, int n, int max_out);


// Names a tagged frame. False for an address that is not a Python frame of this process.
bool describe_python_frame(uintptr_t tagged, PythonFrameInfo* out);

// Off: capture_python() returns nothing. GilOnly: only the public-API path (the thread must
// hold the GIL); the direct read of the frame chain is never used. Set before the first capture.
enum class PythonReadMode { Auto, GilOnly, Off };
void set_python_read_mode(PythonReadMode mode);

// One line saying which interpreter was found and how its frames are read (or why not), for the
// debug log; "none" before Python is found.
std::string_view python_support();

// Whether frames are read directly (without the GIL) in this process.
bool python_reads_directly();

// Captures whose direct walk found the frame chain unreadable or implausible (those stacks
// have no Python frames); counted for the exit summary.
uint64_t python_walks_failed();

// Decodes a CPython 3.11+ location table (co_linetable) for the code unit at `instr_index`;
// exposed for the unit test. Returns the line, or -1 where the table says "no location".
int python_line_from_location_table(const uint8_t* table, size_t size, int first_line,
                                    int instr_index);

}  // namespace memtrace::unwind
