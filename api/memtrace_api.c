/* libmemtrace_api.a: include/memtrace/memtrace.h's calls, forwarded to the memtrace_v1_* names
 * libmemtrace.so exports. They are looked up once, at the first call, in the whole process
 * (RTLD_DEFAULT): a program links this archive whether or not memtrace is preloaded, and without it
 * every call returns MEMTRACE_NOT_LOADED. Plain C, so a C program needs no C++ runtime for it. */
#include "memtrace/memtrace.h"
#include "memtrace/memtrace_v1.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#define MEMTRACE_V1_POINTER(x) static __typeof__(&memtrace_v1_##x) p_##x;
MEMTRACE_V1_SYMBOLS(MEMTRACE_V1_POINTER)
#undef MEMTRACE_V1_POINTER

static pthread_once_t resolved = PTHREAD_ONCE_INIT;
static int loaded;

static void resolve(void) {
  int saved = errno;
#define MEMTRACE_V1_LOOKUP(x) p_##x = (__typeof__(p_##x))dlsym(RTLD_DEFAULT, "memtrace_v1_" #x);
  MEMTRACE_V1_SYMBOLS(MEMTRACE_V1_LOOKUP)
#undef MEMTRACE_V1_LOOKUP
  /* All of them or none: a library that lacks one is not the one this archive was built for. */
  loaded = 1;
#define MEMTRACE_V1_CHECK(x) if (!p_##x) loaded = 0;
  MEMTRACE_V1_SYMBOLS(MEMTRACE_V1_CHECK)
#undef MEMTRACE_V1_CHECK
  (void)dlerror(); /* a failed lookup leaves no message for the program's own dlerror() */
  errno = saved;
}

static int have_memtrace(void) {
  pthread_once(&resolved, resolve);
  return loaded;
}

const char* memtrace_status_string(memtrace_status status) {
  switch (status) {
    case MEMTRACE_OK: return "ok";
    case MEMTRACE_NOT_LOADED: return "memtrace is not loaded (libmemtrace.so is not preloaded)";
    case MEMTRACE_NOT_RECORDING: return "memtrace is loaded but this process is not recorded";
    case MEMTRACE_INVALID_ARGUMENT: return "invalid argument";
    case MEMTRACE_NO_OPEN_RANGE: return "no range is open on this thread";
    case MEMTRACE_WRITE_FAILED: return "the snapshot could not be written (memtrace's log says why)";
    case MEMTRACE_FINISHED: return "the exit snapshot is taken: no snapshot after it";
    case MEMTRACE_ERROR: return "memtrace failed";
  }
  return "unknown memtrace status";
}

int memtrace_is_loaded(void) { return have_memtrace(); }

memtrace_status memtrace_range_push(const char* name) {
  return have_memtrace() ? (memtrace_status)p_range_push(name) : MEMTRACE_NOT_LOADED;
}

memtrace_status memtrace_range_pop(void) {
  return have_memtrace() ? (memtrace_status)p_range_pop() : MEMTRACE_NOT_LOADED;
}

memtrace_status memtrace_annotate(const char* text) {
  return have_memtrace() ? (memtrace_status)p_annotate(text) : MEMTRACE_NOT_LOADED;
}

memtrace_status memtrace_dump_path(const char* path, char* written_path, size_t written_path_size) {
  if (written_path && written_path_size) written_path[0] = '\0';
  if (!written_path) written_path_size = 0;
  return have_memtrace() ? (memtrace_status)p_dump(path, written_path, written_path_size) : MEMTRACE_NOT_LOADED;
}

memtrace_status memtrace_dump(const char* path) { return memtrace_dump_path(path, NULL, 0); }

memtrace_status memtrace_memory_stats(struct memtrace_memory_stats* stats) {
  if (!have_memtrace()) return MEMTRACE_NOT_LOADED;
  if (!stats) return MEMTRACE_INVALID_ARGUMENT;
  return (memtrace_status)p_memory_stats(stats);
}
