/* memtrace's public API: a program marks its phases, takes a snapshot or reads its memory numbers
 * itself. Link libmemtrace_api.a (pkg-config memtrace, or find_package(memtrace) and the target
 * memtrace::api). The calls find libmemtrace.so in the process at their first use; when it is not
 * preloaded every call does nothing and returns MEMTRACE_NOT_LOADED, so the same binary runs with
 * and without memtrace. Every call is thread-safe, never calls into CUDA and never changes errno.
 * docs/api.md describes each call; docs/ranges.md what ranges become in a snapshot. */
#ifndef MEMTRACE_MEMTRACE_H
#define MEMTRACE_MEMTRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a call came to. New codes may be added; treat unknown ones as failures. */
typedef enum memtrace_status {
  MEMTRACE_OK = 0,
  MEMTRACE_NOT_LOADED = 1,       /* libmemtrace.so is not in this process: nothing was done */
  MEMTRACE_NOT_RECORDING = 2,    /* loaded, but this process is not recorded (MEMTRACE_RANKS
                                    leaves its rank out, secure execution, a failed start) */
  MEMTRACE_INVALID_ARGUMENT = 3, /* a null pointer where text or a struct is needed, a struct
                                    whose size field is too small */
  MEMTRACE_NO_OPEN_RANGE = 4,    /* memtrace_range_pop with no range open on this thread */
  MEMTRACE_WRITE_FAILED = 5,     /* the snapshot could not be written (memtrace said why on its
                                    log, one line); no file was left at the path */
  MEMTRACE_FINISHED = 6,         /* the exit snapshot is taken: no snapshot is written after it */
  MEMTRACE_ERROR = 7             /* anything else went wrong inside memtrace */
} memtrace_status;

/* A constant English phrase for a status ("memtrace is not loaded", ...); never null. */
const char* memtrace_status_string(memtrace_status status);

/* 1 when libmemtrace.so is in the process (preloaded), 0 otherwise. */
int memtrace_is_loaded(void);

/* A range on the calling thread, as NVTX's nvtxRangePushA/nvtxRangePop on the default domain:
 * allocations made until the matching pop carry its name (and those of the ranges around it). */
memtrace_status memtrace_range_push(const char* name);
memtrace_status memtrace_range_pop(void);

/* A marker at this moment: an 'annotate' entry carrying `text` in the snapshot's history. */
memtrace_status memtrace_annotate(const char* text);

/* Writes a snapshot now, in the calling thread, and returns once the file is complete.
 * path NULL: under the configured name (MEMTRACE_OUTPUT, numbered as any on-demand snapshot);
 * otherwise exactly at `path` ('%' is not expanded). A file there is replaced only when the new
 * one is complete. MEMTRACE_WRITE_FAILED when it cannot be written. */
memtrace_status memtrace_dump(const char* path);
/* The same; the path written (NUL-terminated, cut to written_path_size - 1 bytes) is copied into
 * written_path when that is not NULL. 4096 bytes always suffice (PATH_MAX). */
memtrace_status memtrace_dump_path(const char* path, char* written_path, size_t written_path_size);

/* Memory numbers now. The struct grows only at its end: set `size` to sizeof(struct
 * memtrace_memory_stats) before the call; memtrace fills what fits and sets `version`. */
#define MEMTRACE_STATS_VERSION 1
#define MEMTRACE_STATS_MAX_DEVICES 64
#define MEMTRACE_STATS_MAX_OWNERS 256
#define MEMTRACE_STATS_OWNER_NAME 128

struct memtrace_usage {
  uint64_t current;     /* bytes now */
  uint64_t peak;        /* the most bytes at any moment */
  uint64_t allocations; /* allocations made so far */
};

struct memtrace_device_stats {
  struct memtrace_usage reserved;  /* device memory the driver gave up (what nvidia-smi counts) */
  struct memtrace_usage allocated; /* of it, in blocks the program holds; the same as reserved
                                      unless memtrace's caching allocator keeps freed blocks */
};

struct memtrace_owner_stats {
  char name[MEMTRACE_STATS_OWNER_NAME]; /* the library that asked (a file name), "unknown" for
                                           id 0; cut to fit, always NUL-terminated */
  struct memtrace_usage device;         /* its device bytes, all devices together */
};

struct memtrace_memory_stats {
  uint32_t size;    /* in: sizeof(struct memtrace_memory_stats) as the caller was compiled */
  uint32_t version; /* out: MEMTRACE_STATS_VERSION of the library that filled it */
  int32_t device_count; /* devices seen: device[0 .. device_count - 1] are filled */
  int32_t owner_count;  /* owners named: owner[0 .. owner_count - 1] are filled */
  struct memtrace_device_stats all_devices; /* the devices together; its peak is the peak of the sum */
  struct memtrace_device_stats device[MEMTRACE_STATS_MAX_DEVICES];
  struct memtrace_usage host_pinned; /* page-locked host memory, allocated or registered */
  struct memtrace_owner_stats owner[MEMTRACE_STATS_MAX_OWNERS];
};

/* Fills *stats (see above). MEMTRACE_INVALID_ARGUMENT for a null pointer or a size smaller than
 * version 1's struct. */
memtrace_status memtrace_memory_stats(struct memtrace_memory_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_MEMTRACE_H */
