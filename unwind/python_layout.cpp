#include "unwind/python_layout.hpp"

#include <algorithm>
#include <cstring>

#include "unwind/python_debug_offsets.h"
#include "unwind/python_layout311.h"
#include "unwind/python_layout312.h"

namespace memtrace::unwind {

namespace {

uint32_t span_of(std::initializer_list<int64_t> offsets, uint32_t last_width) {
  int64_t hi = 0;
  for (int64_t o : offsets) hi = std::max(hi, o);
  return static_cast<uint32_t>(hi) + last_width;
}

uint64_t u64_at(const uint8_t* t, size_t off) {
  uint64_t v;
  std::memcpy(&v, t + off, sizeof v);
  return v;
}

// Bounds a debug-offsets value must respect to be believed: pointers 8-aligned, everything inside
// the first few KiB of its structure (the real ones are all under 1 KiB).
bool plausible(uint64_t v, uint64_t limit, bool pointer) {
  return v < limit && (!pointer || v % 8 == 0);
}

}  // namespace

uint32_t PythonLayout::frame_span() const {
  return span_of({frame_code, frame_previous, frame_instr, frame_owner,
                  frame_is_entry < 0 ? 0 : frame_is_entry},
                 8);
}

uint32_t PythonLayout::code_span() const {
  return span_of({code_filename, code_qualname, code_linetable, code_firstlineno,
                  code_firsttraceable < 0 ? 0 : code_firsttraceable, ob_type},
                 8);
}

bool python_table_layout(int minor, PythonLayout* out) {
  PythonLayout l;
  l.minor = minor;
  l.via_cframe = true;
  l.instr_is_previous = true;
  // The two tables name the same fields; MT_PY311_* and MT_PY312_* differ only in their values.
#define MT_FROM_TABLE(V)                               \
  l.ts_frame = MT_PY##V##_TS_CFRAME;                   \
  l.cframe_current = MT_PY##V##_CFRAME_CURRENT;        \
  l.frame_code = MT_PY##V##_FRAME_CODE;                \
  l.frame_previous = MT_PY##V##_FRAME_PREVIOUS;        \
  l.frame_instr = MT_PY##V##_FRAME_PREV_INSTR;         \
  l.frame_owner = MT_PY##V##_FRAME_OWNER;              \
  l.owned_by_generator = MT_PY##V##_OWNED_BY_GENERATOR; \
  l.code_filename = MT_PY##V##_CODE_FILENAME;          \
  l.code_qualname = MT_PY##V##_CODE_QUALNAME;          \
  l.code_linetable = MT_PY##V##_CODE_LINETABLE;        \
  l.code_firstlineno = MT_PY##V##_CODE_FIRSTLINENO;    \
  l.code_adaptive = MT_PY##V##_CODE_ADAPTIVE;          \
  l.code_firsttraceable = MT_PY##V##_CODE_FIRSTTRACEABLE; \
  l.ob_type = MT_PY##V##_OB_TYPE;                      \
  l.bytes_size = MT_PY##V##_VAR_SIZE;                  \
  l.bytes_data = MT_PY##V##_BYTES_DATA;                \
  l.str_length = MT_PY##V##_STR_LENGTH;                \
  l.str_state = MT_PY##V##_STR_STATE;                  \
  l.str_ascii_data = MT_PY##V##_ASCII_DATA;            \
  l.str_compact_data = MT_PY##V##_COMPACT_DATA
  if (minor == 11) {
    MT_FROM_TABLE(311);
    l.frame_is_entry = MT_PY311_FRAME_IS_ENTRY;
    l.shim_owner = 3;  // 3.11 has no shim frames; its owners are 0-2
  } else if (minor == 12) {
    MT_FROM_TABLE(312);
    l.shim_owner = MT_PY312_OWNED_BY_CSTACK;
  } else {
    return false;
  }
#undef MT_FROM_TABLE
  *out = l;
  return true;
}

size_t python_debug_offsets_size(int minor) {
  if (minor == 13) return MT_PYDBG313_SIZE;
  if (minor == 14) return MT_PYDBG314_SIZE;
  return 0;
}

bool python_debug_offsets_layout(const uint8_t* t, size_t size, int minor, PythonLayout* out,
                                 const char** why) {
  auto fail = [&](const char* reason) {
    *why = reason;
    return false;
  };
  const size_t need = python_debug_offsets_size(minor);
  if (need == 0) return fail("no known _Py_DebugOffsets shape for this version");
  if (!t || size < need) return fail("_Py_DebugOffsets could not be read whole");
  if (std::memcmp(t + MT_PYDBG_COOKIE, "xdebugpy", 8) != 0) return fail("_Py_DebugOffsets cookie is wrong");
  const uint64_t version = u64_at(t, MT_PYDBG_VERSION);
  if ((version >> 24) != 3 || ((version >> 16) & 0xFF) != static_cast<uint64_t>(minor))
    return fail("_Py_DebugOffsets was written by another Python version");
  const uint64_t ft = u64_at(t, MT_PYDBG_FREE_THREADED);
  if (ft > 1) return fail("_Py_DebugOffsets free_threaded flag is not 0 or 1");

#define MT_FIELD(name) static_cast<size_t>(minor == 13 ? MT_PYDBG313_##name : MT_PYDBG314_##name)
  struct Field {
    size_t at;
    uint64_t limit;
    bool pointer;
    uint64_t value = 0;
  };
  Field f[] = {
      {MT_FIELD(TS_CURRENT_FRAME), 4096, true},  {MT_FIELD(FRAME_PREVIOUS), 512, true},
      {MT_FIELD(FRAME_EXECUTABLE), 512, true},   {MT_FIELD(FRAME_INSTR_PTR), 512, true},
      {MT_FIELD(FRAME_OWNER), 512, false},       {MT_FIELD(CODE_FILENAME), 1024, true},
      {MT_FIELD(CODE_QUALNAME), 1024, true},     {MT_FIELD(CODE_LINETABLE), 1024, true},
      {MT_FIELD(CODE_FIRSTLINENO), 1024, false}, {MT_FIELD(CODE_ADAPTIVE), 1024, false},
      {MT_FIELD(OB_TYPE), 64, true},             {MT_FIELD(BYTES_SIZE), 64, true},
      {MT_FIELD(BYTES_DATA), 128, false},        {MT_FIELD(STR_STATE), 128, false},
      {MT_FIELD(STR_LENGTH), 128, true},         {MT_FIELD(STR_ASCII_SIZE), 256, false},
  };
#undef MT_FIELD
  for (Field& x : f) {
    x.value = u64_at(t, x.at);
    if (!plausible(x.value, x.limit, x.pointer)) return fail("a _Py_DebugOffsets offset is out of bounds");
  }
  enum { kTs, kPrev, kExec, kInstr, kOwner, kFile, kQual, kLines, kFirst, kAdaptive, kType,
         kBytesSize, kBytesData, kState, kLength, kAsciiSize };
  // Fields of one structure must not overlap: a shuffled or zeroed table fails here.
  auto distinct = [&](std::initializer_list<int> ids, uint64_t width) {
    for (int a : ids)
      for (int b : ids)
        if (a < b && (f[a].value < f[b].value + width && f[b].value < f[a].value + width)) return false;
    return true;
  };
  if (!distinct({kPrev, kExec, kInstr}, 8) || !distinct({kFile, kQual, kLines}, 8) ||
      !distinct({kType, kBytesSize}, 8) || !distinct({kType, kLength, kState}, 4))
    return fail("_Py_DebugOffsets fields overlap");
  if (f[kOwner].value < f[kInstr].value + 8 && f[kInstr].value < f[kOwner].value + 1)
    return fail("_Py_DebugOffsets fields overlap");
  if (f[kAdaptive].value < f[kLines].value + 8 || f[kAsciiSize].value < f[kLength].value + 8 ||
      f[kBytesData].value < f[kBytesSize].value + 8)
    return fail("_Py_DebugOffsets places data before its header");

  PythonLayout l;
  l.minor = minor;
  l.free_threaded = ft == 1;
  l.via_cframe = false;
  l.ts_frame = static_cast<uint32_t>(f[kTs].value);
  l.frame_previous = static_cast<uint32_t>(f[kPrev].value);
  l.frame_code = static_cast<uint32_t>(f[kExec].value);
  l.frame_instr = static_cast<uint32_t>(f[kInstr].value);
  l.frame_owner = static_cast<uint32_t>(f[kOwner].value);
  l.instr_is_previous = false;
  l.executable_tagged = minor >= 14;
  l.shim_owner = 3;  // 3.13: CSTACK; 3.14: INTERPRETER (3) and CSTACK (4)
  l.owned_by_generator = 1;
  l.code_filename = static_cast<uint32_t>(f[kFile].value);
  l.code_qualname = static_cast<uint32_t>(f[kQual].value);
  l.code_linetable = static_cast<uint32_t>(f[kLines].value);
  l.code_firstlineno = static_cast<uint32_t>(f[kFirst].value);
  l.code_adaptive = static_cast<uint32_t>(f[kAdaptive].value);
  l.ob_type = static_cast<uint32_t>(f[kType].value);
  l.bytes_size = static_cast<uint32_t>(f[kBytesSize].value);
  l.bytes_data = static_cast<uint32_t>(f[kBytesData].value);
  l.str_state = static_cast<uint32_t>(f[kState].value);
  l.str_length = static_cast<uint32_t>(f[kLength].value);
  l.str_ascii_data = static_cast<uint32_t>(f[kAsciiSize].value);
  // PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject (checked by the layout test).
  l.str_compact_data = l.str_ascii_data + 16;
  *out = l;
  return true;
}

}  // namespace memtrace::unwind
