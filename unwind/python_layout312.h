/* Private layout of CPython 3.12 on LP64 targets (x86-64, aarch64), from the 3.12 headers, one
 * constant per field memtrace reads, each named by the header and field it comes from:
 *   Include/cpython/pystate.h         struct _ts (PyThreadState)
 *   Include/internal/pycore_frame.h   _PyCFrame, _PyInterpreterFrame, enum _frameowner
 *   Include/cpython/code.h            _PyCode_DEF (PyCodeObject)
 *   Include/object.h                  PyObject, PyVarObject
 *   Include/cpython/bytesobject.h     PyBytesObject
 *   Include/cpython/unicodeobject.h   PyASCIIObject, PyCompactUnicodeObject
 * Stable across 3.12.x. Checked against installed 3.12 headers by
 * unwind/tests/python_layout_check.c, and cross-checked when written against py-spy's
 * bindgen output for 3.12.0 and two eBPF profilers' offset tables (docs/python-frames.md). */
#ifndef MEMTRACE_PYTHON_LAYOUT312_H
#define MEMTRACE_PYTHON_LAYOUT312_H

#define MT_PY312_TS_CFRAME 56            /* PyThreadState.cframe */
#define MT_PY312_CFRAME_CURRENT 0        /* _PyCFrame.current_frame (use_tracing is gone) */
#define MT_PY312_FRAME_CODE 0            /* _PyInterpreterFrame.f_code */
#define MT_PY312_FRAME_PREVIOUS 8        /* _PyInterpreterFrame.previous */
#define MT_PY312_FRAME_PREV_INSTR 56     /* _PyInterpreterFrame.prev_instr */
#define MT_PY312_FRAME_OWNER 70          /* _PyInterpreterFrame.owner */
#define MT_PY312_OWNED_BY_GENERATOR 1    /* FRAME_OWNED_BY_GENERATOR */
#define MT_PY312_OWNED_BY_CSTACK 3       /* FRAME_OWNED_BY_CSTACK: the entry shim of each eval call */
#define MT_PY312_OB_TYPE 8               /* PyObject.ob_type */
#define MT_PY312_CODE_FIRSTLINENO 68     /* PyCodeObject.co_firstlineno */
#define MT_PY312_CODE_FILENAME 112       /* PyCodeObject.co_filename */
#define MT_PY312_CODE_QUALNAME 128       /* PyCodeObject.co_qualname */
#define MT_PY312_CODE_LINETABLE 136      /* PyCodeObject.co_linetable */
#define MT_PY312_CODE_FIRSTTRACEABLE 176 /* PyCodeObject._co_firsttraceable */
#define MT_PY312_CODE_ADAPTIVE 192       /* PyCodeObject.co_code_adaptive */
#define MT_PY312_VAR_SIZE 16             /* PyVarObject.ob_size */
#define MT_PY312_BYTES_DATA 32           /* PyBytesObject.ob_sval */
#define MT_PY312_STR_LENGTH 16           /* PyASCIIObject.length */
#define MT_PY312_STR_STATE 32            /* PyASCIIObject.state */
#define MT_PY312_ASCII_DATA 40           /* sizeof(PyASCIIObject): wstr is gone */
#define MT_PY312_COMPACT_DATA 56         /* sizeof(PyCompactUnicodeObject) */

#endif
