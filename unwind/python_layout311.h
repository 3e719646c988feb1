/* Private layout of CPython 3.11 on LP64 targets (x86-64, aarch64), from the 3.11 headers:
 * Include/cpython/pystate.h, Include/internal/pycore_frame.h, Include/cpython/code.h,
 * Include/cpython/unicodeobject.h, Include/cpython/bytesobject.h. Plain C macros so that the
 * test that checks them against those headers (unwind/tests/python_layout_check.c) is C. */
#ifndef MEMTRACE_PYTHON_LAYOUT311_H
#define MEMTRACE_PYTHON_LAYOUT311_H

#define MT_PY311_TS_CFRAME 56            /* PyThreadState.cframe */
#define MT_PY311_CFRAME_CURRENT 8        /* _PyCFrame.current_frame */
#define MT_PY311_FRAME_CODE 32           /* _PyInterpreterFrame.f_code */
#define MT_PY311_FRAME_PREVIOUS 48       /* _PyInterpreterFrame.previous */
#define MT_PY311_FRAME_PREV_INSTR 56     /* _PyInterpreterFrame.prev_instr */
#define MT_PY311_FRAME_IS_ENTRY 68       /* _PyInterpreterFrame.is_entry: first frame of an eval call */
#define MT_PY311_FRAME_OWNER 69          /* _PyInterpreterFrame.owner */
#define MT_PY311_OWNED_BY_GENERATOR 1    /* FRAME_OWNED_BY_GENERATOR */
#define MT_PY311_OB_TYPE 8               /* PyObject.ob_type */
#define MT_PY311_CODE_FIRSTLINENO 72     /* PyCodeObject.co_firstlineno */
#define MT_PY311_CODE_FILENAME 112       /* PyCodeObject.co_filename */
#define MT_PY311_CODE_QUALNAME 128       /* PyCodeObject.co_qualname */
#define MT_PY311_CODE_LINETABLE 136      /* PyCodeObject.co_linetable */
#define MT_PY311_CODE_FIRSTTRACEABLE 168 /* PyCodeObject._co_firsttraceable */
#define MT_PY311_CODE_ADAPTIVE 184       /* PyCodeObject.co_code_adaptive */
#define MT_PY311_VAR_SIZE 16             /* PyVarObject.ob_size */
#define MT_PY311_BYTES_DATA 32           /* PyBytesObject.ob_sval */
#define MT_PY311_STR_LENGTH 16           /* PyASCIIObject.length */
#define MT_PY311_STR_STATE 32            /* PyASCIIObject.state */
#define MT_PY311_ASCII_DATA 48           /* sizeof(PyASCIIObject) */
#define MT_PY311_COMPACT_DATA 72         /* sizeof(PyCompactUnicodeObject) */

#endif
