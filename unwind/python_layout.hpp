// Where the fields memtrace reads live inside one CPython minor version's private structures:
// the thread state's current frame, the interpreter frame, the code object, and the str and
// bytes objects that name a frame. 3.11 and 3.12 come from layout tables checked against their
// headers (python_layout311.h, python_layout312.h); 3.13 and newer from the interpreter's own
// _Py_DebugOffsets, so a patch release that moves a field is followed, and an interpreter whose
// table is damaged or implausible is refused rather than trusted. See docs/python-frames.md.
#pragma once
#include <cstddef>
#include <cstdint>

namespace memtrace::unwind {

struct PythonLayout {
  int minor = 0;
  bool free_threaded = false;

  // Thread state -> innermost frame. 3.11/3.12 go through the C-stack _PyCFrame.
  bool via_cframe = false;
  uint32_t ts_frame = 0;        // tstate->current_frame (3.13+) or tstate->cframe
  uint32_t cframe_current = 0;  // _PyCFrame.current_frame

  // _PyInterpreterFrame.
  uint32_t frame_code = 0;      // f_code (3.11/3.12), f_executable (3.13+)
  uint32_t frame_previous = 0;
  uint32_t frame_instr = 0;     // prev_instr (3.11/3.12), instr_ptr (3.13+)
  uint32_t frame_owner = 0;     // one byte
  int32_t frame_is_entry = -1;  // 3.11 only: first frame of an eval call (one byte)
  bool instr_is_previous = false;  // prev_instr points at the last instruction run
  bool executable_tagged = false;  // 3.14: f_executable is a _PyStackRef, low bits are tags
  int shim_owner = 3;           // owners >= this are entry/shim frames, not Python code
  int owned_by_generator = 1;

  // PyCodeObject.
  uint32_t code_filename = 0, code_qualname = 0, code_linetable = 0, code_firstlineno = 0;
  uint32_t code_adaptive = 0;            // first code unit (co_code_adaptive)
  int32_t code_firsttraceable = -1;      // 3.11/3.12: frames before it have not started

  // Objects.
  uint32_t ob_type = 8;
  uint32_t bytes_size = 16, bytes_data = 32;
  uint32_t str_length = 16, str_state = 32, str_ascii_data = 0, str_compact_data = 0;

  // The span of a frame and of a code object header that holds every field above, so each is
  // read with one validated copy.
  uint32_t frame_span() const;
  uint32_t code_span() const;
};

// The layout table of 3.11 or 3.12; false for other versions.
bool python_table_layout(int minor, PythonLayout* out);

// Reads the layout of 3.13 or 3.14 out of the interpreter's _Py_DebugOffsets, copied into
// `table` (`size` bytes, at least the version's table size). Checks the cookie, that the version
// it records is 3.<minor>, and that every offset used lies within sane bounds and does not
// overlap the others; on failure returns false and says why in *why (static text).
bool python_debug_offsets_layout(const uint8_t* table, size_t size, int minor, PythonLayout* out,
                                 const char** why);

// The number of bytes of _Py_DebugOffsets that python_debug_offsets_layout needs for `minor`
// (0 when that version has no known table shape).
size_t python_debug_offsets_size(int minor);

}  // namespace memtrace::unwind
