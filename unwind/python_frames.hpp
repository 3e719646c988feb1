// Python frames of the calling thread, for programs that run in CPython (PyTorch, CuPy, JAX,
// ctypes scripts). They are stored in the same stack table as native return addresses, as
// tagged pseudo-addresses (bit 63 set: no user-space code lives there), so a stack that mixes
// native and Python frames is still one interned sequence and needs no second table.
//
// Two ways to read the frames, both without running Python code and without taking the GIL
// (taking it inside a hooked cudaMalloc can deadlock: PyTorch calls cudaMalloc with its
// allocator mutex held and the GIL released, while another thread holds the GIL and waits for
// that mutex):
//  - the thread holds the GIL (ctypes.PyDLL, CuPy): the public C API (Python 3.9+);
//  - it does not (PyTorch releases the GIL around its operators): this thread's own frame
//    chain is read directly. Its frames cannot change while the thread is inside our hook,
//    but the layout is private to each CPython minor version, so this path exists only for
//    the versions whose layout memtrace knows (3.11; checked against the headers by a test).
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

// Whether a return address lies in the interpreter's own code: native frames from there on
// are the interpreter running the Python frames, which replace them.
bool in_python_interpreter(uintptr_t pc);

// Names a tagged frame. False for an address that is not a Python frame of this process.
bool describe_python_frame(uintptr_t tagged, PythonFrameInfo* out);

// Off: capture_python() returns nothing. GilOnly: only the public-API path (the thread must
// hold the GIL); the direct read of the frame chain is never used. Set before the first capture.
enum class PythonReadMode { Auto, GilOnly, Off };
void set_python_read_mode(PythonReadMode mode);

// Which reading path is active: "none", "api" (GIL-held only) or "api+3.11". For the debug log.
std::string_view python_support();

// Decodes a CPython 3.11+ location table (co_linetable) for the code unit at `instr_index`;
// exposed for the unit test. Returns the line, or -1 where the table says "no location".
int python_line_from_location_table(const uint8_t* table, size_t size, int first_line,
                                    int instr_index);

}  // namespace memtrace::unwind
