/* Route: a program linked with -lcuda calls cuMemAlloc/cuMemFree (cuMemAlloc_v2/cuMemFree_v2
 * by the header's macros) directly: memtrace's exported wrappers must catch them. */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1 << 20);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 3000);
  CUdeviceptr c = mt_mem_alloc("alloc_c", 65536);
  mt_mem_free("free_b", b);
  (void)a;
  (void)c; /* a and c stay allocated: they are the snapshot's segments */
  mt_done();
  return 0;
}
