/* Glue: frees of pointers memtrace never saw are forwarded; the driver's answer comes back
 * unchanged (compared with a run without memtrace). */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  CU("free_unknown", cuMemFree((CUdeviceptr)0x7f0000123000ull));
  CU("free_null", cuMemFree(0));
  CUdeviceptr a = mt_mem_alloc("alloc_a", 4096);
  mt_mem_free("free_a", a);
  CU("free_a_again", cuMemFree(a));
  CU("free_async_unknown", cuMemFreeAsync((CUdeviceptr)0x7f0000456000ull, 0));
  CU("free_host_unknown", cuMemFreeHost((void*)0x1000));
  static char not_registered[8192];
  CU("unregister_unknown", cuMemHostUnregister(not_registered));
  CU("unmap_unknown", cuMemUnmap((CUdeviceptr)0x7f0000789000ull, 65536));
  CU("release_unknown", cuMemRelease((CUmemGenericAllocationHandle)0x123456));
  CUdeviceptr b = mt_mem_alloc("alloc_b", 8192);
  (void)b;
  mt_done();
  return 0;
}
