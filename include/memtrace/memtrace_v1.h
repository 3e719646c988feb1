/* The symbols libmemtrace.so exports for its public API, version 1. libmemtrace_api.a looks them
 * up in the process (dlsym with RTLD_DEFAULT) and the Python module calls them through ctypes; a
 * binding in another language may do the same. Each returns a memtrace_status (memtrace.h) as an
 * int. A later version adds memtrace_v2_* names beside these, which stay as they are. */
#ifndef MEMTRACE_MEMTRACE_V1_H
#define MEMTRACE_MEMTRACE_V1_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MEMTRACE_OK when the process is recorded (starting the recording session if no CUDA call has
 * yet), MEMTRACE_NOT_RECORDING otherwise. */
int memtrace_v1_recording(void);
int memtrace_v1_range_push(const char* name);
int memtrace_v1_range_pop(void);
int memtrace_v1_annotate(const char* text);
/* path NULL: the configured name ("" is MEMTRACE_INVALID_ARGUMENT). written_path may be NULL. */
int memtrace_v1_dump(const char* path, char* written_path, size_t written_path_size);
/* stats: a struct memtrace_memory_stats whose first field, a uint32_t, is its size. */
int memtrace_v1_memory_stats(void* stats);

#ifdef __cplusplus
}
#endif

/* The names, for code that resolves them (kept in the order above). */
#define MEMTRACE_V1_SYMBOLS(X) \
  X(recording) X(range_push) X(range_pop) X(annotate) X(dump) X(memory_stats)

#endif /* MEMTRACE_MEMTRACE_V1_H */
