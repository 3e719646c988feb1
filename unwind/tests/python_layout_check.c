/* Compiled only where the CPython 3.11 headers are installed: the layout memtrace reads without
 * the GIL (unwind/python_layout311.h) must match them, or the build fails here. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <stddef.h>

#include "unwind/python_layout311.h"

#define SAME(expr, macro) _Static_assert((expr) == (macro), #macro " does not match the headers")
SAME(offsetof(PyThreadState, cframe), MT_PY311_TS_CFRAME);
SAME(offsetof(_PyCFrame, current_frame), MT_PY311_CFRAME_CURRENT);
SAME(offsetof(_PyInterpreterFrame, f_code), MT_PY311_FRAME_CODE);
SAME(offsetof(_PyInterpreterFrame, previous), MT_PY311_FRAME_PREVIOUS);
SAME(offsetof(_PyInterpreterFrame, prev_instr), MT_PY311_FRAME_PREV_INSTR);
SAME(offsetof(_PyInterpreterFrame, owner), MT_PY311_FRAME_OWNER);
SAME(FRAME_OWNED_BY_GENERATOR, MT_PY311_OWNED_BY_GENERATOR);
SAME(offsetof(PyObject, ob_type), MT_PY311_OB_TYPE);
SAME(offsetof(PyCodeObject, co_firstlineno), MT_PY311_CODE_FIRSTLINENO);
SAME(offsetof(PyCodeObject, co_filename), MT_PY311_CODE_FILENAME);
SAME(offsetof(PyCodeObject, co_qualname), MT_PY311_CODE_QUALNAME);
SAME(offsetof(PyCodeObject, co_linetable), MT_PY311_CODE_LINETABLE);
SAME(offsetof(PyCodeObject, _co_firsttraceable), MT_PY311_CODE_FIRSTTRACEABLE);
SAME(offsetof(PyCodeObject, co_code_adaptive), MT_PY311_CODE_ADAPTIVE);
SAME(offsetof(PyVarObject, ob_size), MT_PY311_VAR_SIZE);
SAME(offsetof(PyBytesObject, ob_sval), MT_PY311_BYTES_DATA);
SAME(offsetof(PyASCIIObject, length), MT_PY311_STR_LENGTH);
SAME(sizeof(PyASCIIObject), MT_PY311_ASCII_DATA);
SAME(sizeof(PyCompactUnicodeObject), MT_PY311_COMPACT_DATA);

int main(void) { return 0; }
