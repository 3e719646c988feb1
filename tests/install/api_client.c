/* A program that uses memtrace's public API (include/memtrace/memtrace.h): built against the
 * install tree by tests/install/check_install.sh (pkg-config and find_package) and against the
 * build tree for the process case api_c. It reaches the CUDA driver with dlopen, so it needs no
 * CUDA headers. Prints the process tests' line protocol (tests/process/mt_case.h), plus
 *   STATUS <label> <memtrace_status>    STAT <name> <value>    DUMPED <label> <path>
 * usage: api_client EXPLICIT_PATH UNWRITABLE_PATH */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memtrace/memtrace.h>

typedef int (*init_fn)(unsigned);
typedef int (*device_get_fn)(int*, int);
typedef int (*retain_fn)(void**, int);
typedef int (*set_current_fn)(void*);
typedef int (*alloc_fn)(uint64_t*, size_t);
typedef int (*free_fn)(uint64_t);

static alloc_fn cu_alloc;
static free_fn cu_free;
static int errno_changed;

/* errno is set just before each call and read right after it: memtrace must leave it alone. */
static memtrace_status report(const char* label, memtrace_status s) {
  if (errno != 4242) errno_changed = 1;
  printf("STATUS %s %d\n", label, (int)s);
  return s;
}
#define status(label, call) report((label), (errno = 4242, (call)))

static uint64_t alloc(const char* label, size_t bytes) {
  uint64_t p = 0;
  int rc = cu_alloc(&p, bytes);
  printf("RC %s %d\n", label, rc);
  if (rc != 0) return 0;
  printf("ALLOC dev 0x%llx %zu %zu\n", (unsigned long long)p, bytes, bytes);
  printf("LABEL %s 0x%llx\n", label, (unsigned long long)p);
  return p;
}

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    printf("STOP %s\n", name);
    exit(3);
  }
  return f;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 3) {
    fprintf(stderr, "usage: api_client EXPLICIT_PATH UNWRITABLE_PATH\n");
    return 2;
  }
  printf("STAT loaded %d\n", memtrace_is_loaded());
  status("pop_none_open", memtrace_range_pop());
  status("push_null", memtrace_range_push(NULL));
  status("annotate_null", memtrace_annotate(NULL));
  status("stats_null", memtrace_memory_stats(NULL));
  printf("TEXT %s\n", memtrace_status_string(MEMTRACE_NOT_LOADED));

  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  int dev = 0;
  void* ctx = NULL;
  if (((init_fn)need(cuda, "cuInit"))(0) || ((device_get_fn)need(cuda, "cuDeviceGet"))(&dev, 0) ||
      ((retain_fn)need(cuda, "cuDevicePrimaryCtxRetain"))(&ctx, dev) ||
      ((set_current_fn)need(cuda, "cuCtxSetCurrent"))(ctx)) {
    printf("STOP setup\n");
    return 3;
  }
  cu_alloc = (alloc_fn)need(cuda, "cuMemAlloc_v2");
  cu_free = (free_fn)need(cuda, "cuMemFree_v2");

  status("push_outer", memtrace_range_push("outer"));
  status("push_inner", memtrace_range_push("inner"));
  alloc("in_inner", 1 << 20);
  status("pop_inner", memtrace_range_pop());
  uint64_t in_outer = alloc("in_outer", 65536);
  status("pop_outer", memtrace_range_pop());
  alloc("outside", 3000);
  status("pop_extra", memtrace_range_pop());
  status("annotate", memtrace_annotate("checkpoint one"));

  struct memtrace_memory_stats* st = calloc(1, sizeof *st);
  st->size = 8;
  status("stats_too_small", memtrace_memory_stats(st));
  st->size = sizeof *st;
  if (status("stats", memtrace_memory_stats(st)) == MEMTRACE_OK) {
    printf("STAT version %u\n", st->version);
    printf("STAT device_count %d\n", st->device_count);
    printf("STAT allocated_current %llu\n", (unsigned long long)st->device[0].allocated.current);
    printf("STAT reserved_current %llu\n", (unsigned long long)st->device[0].reserved.current);
    printf("STAT reserved_peak %llu\n", (unsigned long long)st->device[0].reserved.peak);
    printf("STAT all_allocated_current %llu\n", (unsigned long long)st->all_devices.allocated.current);
    printf("STAT allocations %llu\n", (unsigned long long)st->device[0].allocated.allocations);
    uint64_t owned = 0;
    for (int i = 0; i < st->owner_count; ++i) {
      owned += st->owner[i].device.current;
      if (st->owner[i].device.current) printf("OWNER %s %llu\n", st->owner[i].name,
                                              (unsigned long long)st->owner[i].device.current);
    }
    printf("STAT owners_current %llu\n", (unsigned long long)owned);
  }
  free(st);

  char written[4096];
  if (status("dump_explicit", memtrace_dump_path(argv[1], written, sizeof written)) == MEMTRACE_OK)
    printf("DUMPED explicit %s\n", written);
  status("dump_unwritable", memtrace_dump(argv[2]));
  status("dump_empty", memtrace_dump(""));
  if (status("dump_default", memtrace_dump_path(NULL, written, sizeof written)) == MEMTRACE_OK)
    printf("DUMPED default %s\n", written);

  int rc = cu_free(in_outer);
  printf("RC free_in_outer %d\n", rc);
  if (rc == 0) printf("FREE dev 0x%llx\n", (unsigned long long)in_outer);
  printf("STAT errno_kept %d\n", !errno_changed);
  printf("DONE\n");
  return 0;
}
