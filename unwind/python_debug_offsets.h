/* Where memtrace finds the fields it uses inside CPython's _Py_DebugOffsets, the table of
 * private offsets that CPython 3.13 and newer publish at the start of _PyRuntime for debuggers
 * and profilers (3.13: Include/internal/pycore_runtime.h; 3.14:
 * Include/internal/pycore_debug_offsets.h). Every member of the table is a 64-bit integer; the
 * numbers below are byte positions inside it. The table's own shape changes between minor
 * versions (3.14 added fields in the middle), so each minor version has its own column; it is
 * stable across patch releases. Checked against each version's headers by
 * unwind/tests/python_layout_check.c. */
#ifndef MEMTRACE_PYTHON_DEBUG_OFFSETS_H
#define MEMTRACE_PYTHON_DEBUG_OFFSETS_H

#define MT_PYDBG_COOKIE 0  /* char[8] "xdebugpy" */
#define MT_PYDBG_VERSION 8 /* PY_VERSION_HEX of the interpreter that wrote it */
#define MT_PYDBG_FREE_THREADED 16

/* 3.13 */
#define MT_PYDBG313_TS_CURRENT_FRAME 184     /* thread_state.current_frame */
#define MT_PYDBG313_FRAME_PREVIOUS 232       /* interpreter_frame.previous */
#define MT_PYDBG313_FRAME_EXECUTABLE 240     /* interpreter_frame.executable */
#define MT_PYDBG313_FRAME_INSTR_PTR 248      /* interpreter_frame.instr_ptr */
#define MT_PYDBG313_FRAME_OWNER 264          /* interpreter_frame.owner */
#define MT_PYDBG313_CODE_FILENAME 280        /* code_object.filename */
#define MT_PYDBG313_CODE_QUALNAME 296        /* code_object.qualname */
#define MT_PYDBG313_CODE_LINETABLE 304       /* code_object.linetable */
#define MT_PYDBG313_CODE_FIRSTLINENO 312     /* code_object.firstlineno */
#define MT_PYDBG313_CODE_ADAPTIVE 344        /* code_object.co_code_adaptive */
#define MT_PYDBG313_OB_TYPE 360              /* pyobject.ob_type */
#define MT_PYDBG313_BYTES_SIZE 520           /* bytes_object.ob_size */
#define MT_PYDBG313_BYTES_DATA 528           /* bytes_object.ob_sval */
#define MT_PYDBG313_STR_STATE 544            /* unicode_object.state */
#define MT_PYDBG313_STR_LENGTH 552           /* unicode_object.length */
#define MT_PYDBG313_STR_ASCII_SIZE 560       /* unicode_object.asciiobject_size */
#define MT_PYDBG313_SIZE 584                 /* sizeof(_Py_DebugOffsets) */

/* 3.14 */
#define MT_PYDBG314_TS_CURRENT_FRAME 208
#define MT_PYDBG314_FRAME_PREVIOUS 256
#define MT_PYDBG314_FRAME_EXECUTABLE 264
#define MT_PYDBG314_FRAME_INSTR_PTR 272
#define MT_PYDBG314_FRAME_OWNER 288
#define MT_PYDBG314_CODE_FILENAME 320
#define MT_PYDBG314_CODE_QUALNAME 336
#define MT_PYDBG314_CODE_LINETABLE 344
#define MT_PYDBG314_CODE_FIRSTLINENO 352
#define MT_PYDBG314_CODE_ADAPTIVE 384
#define MT_PYDBG314_OB_TYPE 408
#define MT_PYDBG314_BYTES_SIZE 600
#define MT_PYDBG314_BYTES_DATA 608
#define MT_PYDBG314_STR_STATE 624
#define MT_PYDBG314_STR_LENGTH 632
#define MT_PYDBG314_STR_ASCII_SIZE 640
#define MT_PYDBG314_SIZE 760

#endif
