// The walk over one thread's CPython frame chain, reading only through validated reads
// (readable_memory.hpp) and a PythonLayout, so that it runs without the GIL on a thread that is
// inside a hooked call, and so that a torn or misread chain ends the walk instead of the program.
// Separated from python_frames.cpp (which finds the interpreter and names code objects) so the
// tests can drive it over hand-built frames, including broken ones.
#pragma once
#include <cstdint>
#include <string>

#include "unwind/python_layout.hpp"

namespace memtrace::unwind {

// Addresses of the interpreter's type objects: a code object is recognised by its ob_type.
struct PythonTypes {
  uintptr_t code = 0, unicode = 0, bytes = 0;
};

// What the walk read of one code object: enough to tell it from another one later allocated at
// the same address, and to name it.
struct CodeFacts {
  uintptr_t code = 0;
  uintptr_t filename = 0, qualname = 0, linetable = 0;
  int first_line = 0;
};

// Gives each code object a stable id and each (code, instruction) a line, from what the walk
// read. Implemented by python_frames.cpp (its code table) and by the tests.
class CodeNamer {
 public:
  virtual ~CodeNamer() = default;
  // 0 when the code object cannot be named (the frame is still counted, as "<python>").
  virtual uint32_t id_for(const CodeFacts& facts) = 0;
  // The line for code unit `index` (-1: before the first instruction), 0 when unknown.
  virtual int line_for(uint32_t id, const CodeFacts& facts, int index) = 0;
};

// Limits that keep any walk short, whatever memory holds.
constexpr int kMaxPythonSteps = 2048;  // frames visited, shims included
constexpr int kMaxPythonGroups = 64;   // eval-loop entries told apart in one stack

struct PythonWalk {
  int frames = 0;         // written to out
  int groups = 0;         // group_end[0..groups): frame counts where each eval entry ends
  uint16_t group_end[kMaxPythonGroups];
  bool failed = false;    // the chain could not be read whole: nothing should be used
  bool truncated = false; // out filled before the chain ended
};

// The innermost frame of thread state `tstate`; 0 when it runs no Python now. *ok is false when
// the thread state itself could not be read.
uintptr_t python_first_frame(const PythonLayout& layout, uintptr_t tstate, bool* ok);

// Walks from `frame` outwards, writing tagged frames (python_frames.hpp) innermost first.
PythonWalk walk_python_frames(const PythonLayout& layout, const PythonTypes& types, uintptr_t frame,
                              CodeNamer& namer, uintptr_t* out, int max_frames);

// A str object's text as UTF-8, read through validated reads; false for anything that is not
// a compact str of plausible length.
bool read_python_str(const PythonLayout& layout, const PythonTypes& types, uintptr_t obj,
                     std::string* out);

// The data and size of a bytes object (validated: the whole data is readable).
bool python_bytes_span(const PythonLayout& layout, const PythonTypes& types, uintptr_t obj,
                       uintptr_t* data, size_t* size);

// The tagged pseudo-address of a Python frame (python_frames.hpp describes the encoding).
uintptr_t python_frame_tag(uint32_t code_id, int line);

}  // namespace memtrace::unwind
