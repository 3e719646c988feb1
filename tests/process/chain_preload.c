/* A second preload library (libchain.so, loaded after libmemtrace.so) that wraps puts() and
 * finds the real one with dlsym(RTLD_NEXT, ...). RTLD_NEXT is relative to the caller, so this
 * only works if memtrace's exported dlsym hands the lookup on by a tail call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*puts_fn)(const char*);
static int g_calls;

static const char* module_of(void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "-";
  const char* s = strrchr(info.dli_fname, '/');
  return s ? s + 1 : info.dli_fname;
}

__attribute__((visibility("default"))) int puts(const char* s) {
  puts_fn next = (puts_fn)dlsym(RTLD_NEXT, "puts");
  if (next == NULL || next == puts) {
    static const char msg[] = "CHAIN_BROKEN dlsym(RTLD_NEXT, puts) did not reach libc\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(42);
  }
  ++g_calls;
  return next(s);
}

__attribute__((visibility("default"))) void chain_report(void) {
  void* next_puts = dlsym(RTLD_NEXT, "puts");
  void* next_malloc = dlsym(RTLD_NEXT, "malloc");
  void* next_dlsym = dlsym(RTLD_NEXT, "dlsym");
  printf("CHAIN calls %d\n", g_calls);
  printf("CHAIN next_puts %s\n", module_of(next_puts));
  printf("CHAIN next_malloc %s\n", module_of(next_malloc));
  printf("CHAIN next_dlsym %s\n", module_of(next_dlsym));
  fflush(stdout);
}
