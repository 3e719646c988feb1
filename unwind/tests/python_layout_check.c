/* Built once per CPython version whose headers the build finds (MT_CHECK_MINOR = 11, 12, 13, 14):
 * the layout memtrace reads without the GIL must be the one those headers describe, or the build
 * fails here (offsets) or the test fails when run (string state bits). For 3.13 and newer
 * memtrace takes the layout from the interpreter's _Py_DebugOffsets, so what is checked is where
 * memtrace finds each field inside that table, and the frame-owner values it relies on. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SAME(expr, macro) _Static_assert((expr) == (macro), #macro " does not match the headers")

#if MT_CHECK_MINOR == 11 || MT_CHECK_MINOR == 12
#if MT_CHECK_MINOR == 11
#include "unwind/python_layout311.h"
#define P(x) MT_PY311_##x
SAME(offsetof(_PyInterpreterFrame, is_entry), MT_PY311_FRAME_IS_ENTRY);
#else
#include "unwind/python_layout312.h"
#define P(x) MT_PY312_##x
SAME(FRAME_OWNED_BY_CSTACK, MT_PY312_OWNED_BY_CSTACK);
#endif
SAME(offsetof(PyThreadState, cframe), P(TS_CFRAME));
SAME(offsetof(_PyCFrame, current_frame), P(CFRAME_CURRENT));
SAME(offsetof(_PyInterpreterFrame, f_code), P(FRAME_CODE));
SAME(offsetof(_PyInterpreterFrame, previous), P(FRAME_PREVIOUS));
SAME(offsetof(_PyInterpreterFrame, prev_instr), P(FRAME_PREV_INSTR));
SAME(offsetof(_PyInterpreterFrame, owner), P(FRAME_OWNER));
SAME(FRAME_OWNED_BY_GENERATOR, P(OWNED_BY_GENERATOR));
SAME(offsetof(PyObject, ob_type), P(OB_TYPE));
SAME(offsetof(PyCodeObject, co_firstlineno), P(CODE_FIRSTLINENO));
SAME(offsetof(PyCodeObject, co_filename), P(CODE_FILENAME));
SAME(offsetof(PyCodeObject, co_qualname), P(CODE_QUALNAME));
SAME(offsetof(PyCodeObject, co_linetable), P(CODE_LINETABLE));
SAME(offsetof(PyCodeObject, _co_firsttraceable), P(CODE_FIRSTTRACEABLE));
SAME(offsetof(PyCodeObject, co_code_adaptive), P(CODE_ADAPTIVE));
SAME(offsetof(PyVarObject, ob_size), P(VAR_SIZE));
SAME(offsetof(PyBytesObject, ob_sval), P(BYTES_DATA));
SAME(offsetof(PyASCIIObject, length), P(STR_LENGTH));
SAME(offsetof(PyASCIIObject, state), P(STR_STATE));
SAME(sizeof(PyASCIIObject), P(ASCII_DATA));
SAME(sizeof(PyCompactUnicodeObject), P(COMPACT_DATA));
#elif MT_CHECK_MINOR == 13 || MT_CHECK_MINOR == 14
#include "unwind/python_debug_offsets.h"
#if MT_CHECK_MINOR == 14
#include <internal/pycore_debug_offsets.h>
#include <internal/pycore_interpframe_structs.h>
#define P(x) MT_PYDBG314_##x
SAME(FRAME_OWNED_BY_INTERPRETER, 3);
SAME(FRAME_OWNED_BY_CSTACK, 4);
#else
#include <internal/pycore_runtime.h>
#define P(x) MT_PYDBG313_##x
SAME(FRAME_OWNED_BY_CSTACK, 3);
#endif
SAME(FRAME_OWNED_BY_GENERATOR, 1);
SAME(offsetof(_Py_DebugOffsets, cookie), MT_PYDBG_COOKIE);
SAME(offsetof(_Py_DebugOffsets, version), MT_PYDBG_VERSION);
SAME(offsetof(_Py_DebugOffsets, free_threaded), MT_PYDBG_FREE_THREADED);
SAME(offsetof(_Py_DebugOffsets, thread_state.current_frame), P(TS_CURRENT_FRAME));
SAME(offsetof(_Py_DebugOffsets, interpreter_frame.previous), P(FRAME_PREVIOUS));
SAME(offsetof(_Py_DebugOffsets, interpreter_frame.executable), P(FRAME_EXECUTABLE));
SAME(offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr), P(FRAME_INSTR_PTR));
SAME(offsetof(_Py_DebugOffsets, interpreter_frame.owner), P(FRAME_OWNER));
SAME(offsetof(_Py_DebugOffsets, code_object.filename), P(CODE_FILENAME));
SAME(offsetof(_Py_DebugOffsets, code_object.qualname), P(CODE_QUALNAME));
SAME(offsetof(_Py_DebugOffsets, code_object.linetable), P(CODE_LINETABLE));
SAME(offsetof(_Py_DebugOffsets, code_object.firstlineno), P(CODE_FIRSTLINENO));
SAME(offsetof(_Py_DebugOffsets, code_object.co_code_adaptive), P(CODE_ADAPTIVE));
SAME(offsetof(_Py_DebugOffsets, pyobject.ob_type), P(OB_TYPE));
SAME(offsetof(_Py_DebugOffsets, bytes_object.ob_size), P(BYTES_SIZE));
SAME(offsetof(_Py_DebugOffsets, bytes_object.ob_sval), P(BYTES_DATA));
SAME(offsetof(_Py_DebugOffsets, unicode_object.state), P(STR_STATE));
SAME(offsetof(_Py_DebugOffsets, unicode_object.length), P(STR_LENGTH));
SAME(offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size), P(STR_ASCII_SIZE));
SAME(sizeof(_Py_DebugOffsets), P(SIZE));
/* Non-ASCII compact text follows PyCompactUnicodeObject, two words after PyASCIIObject. */
SAME(sizeof(PyCompactUnicodeObject), sizeof(PyASCIIObject) + 16);
#else
#error "MT_CHECK_MINOR must be 11, 12, 13 or 14"
#endif

int main(void) {
  /* memtrace decodes a str's state word as: kind in bits 2-4, compact bit 5, ascii bit 6. */
  PyASCIIObject s;
  memset(&s, 0, sizeof s);
  s.state.kind = 2;
  s.state.compact = 1;
  s.state.ascii = 1;
  unsigned int word;
  memcpy(&word, &s.state, sizeof word);
  if (word != ((2u << 2) | (1u << 5) | (1u << 6))) {
    fprintf(stderr, "3.%d: str state bits are 0x%x, memtrace expects kind<<2|compact<<5|ascii<<6\n",
            MT_CHECK_MINOR, word);
    return 1;
  }
  printf("3.%d layout matches the headers\n", MT_CHECK_MINOR);
  return 0;
}
