/* A plugin that allocates device memory and is dlclosed before the snapshot is written: its
 * frames must still be named (module history kept by memtrace). */
#include <cuda.h>

__attribute__((noinline)) static CUresult plugin_alloc_site(CUdeviceptr* p, size_t n, int* line) {
  *line = __LINE__; return cuMemAlloc(p, n);
}

__attribute__((visibility("default"))) CUresult plugin_load_weights(CUdeviceptr* p, size_t n, int* line) {
  CUresult rc = plugin_alloc_site(p, n, line);
  __asm__ volatile("" ::: "memory");  /* keep the call above a real call, not a tail call */
  return rc;
}
