/* A second preload library (libchaincuda.so, loaded after libmemtrace.so) that wraps the driver's
 * cuMemAlloc_v2 and cuMemFree_v2 and finds the real ones with dlsym(RTLD_NEXT, ...), as
 * torch_memory_saver's preload mode does with cudaMalloc. memtrace forwards its own wrappers to
 * this library; this library's RTLD_NEXT lookup must then reach the driver, not memtrace again
 * (which would recurse until the stack overflows). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
static int g_allocs, g_frees, g_depth;

static const char* module_of(void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "-";
  const char* s = strrchr(info.dli_fname, '/');
  return s ? s + 1 : info.dli_fname;
}

static void guard(void) {
  if (++g_depth > 4) {  /* we were called back from what we called: the chain loops */
    static const char msg[] = "CHAIN_LOOP libchaincuda was re-entered through its own RTLD_NEXT target\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(43);
  }
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  guard();
  alloc_fn next = (alloc_fn)dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  CUresult r = next ? next(p, n) : CUDA_ERROR_NOT_FOUND;
  ++g_allocs;
  --g_depth;
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr p) {
  guard();
  free_fn next = (free_fn)dlsym(RTLD_NEXT, "cuMemFree_v2");
  CUresult r = next ? next(p) : CUDA_ERROR_NOT_FOUND;
  ++g_frees;
  --g_depth;
  return r;
}

__attribute__((visibility("default"))) void chain_cuda_report(void) {
  printf("CHAIN allocs %d\n", g_allocs);
  printf("CHAIN frees %d\n", g_frees);
  printf("CHAIN next_alloc %s\n", module_of(dlsym(RTLD_NEXT, "cuMemAlloc_v2")));
  fflush(stdout);
}
