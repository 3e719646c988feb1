/* Faults: out of memory. Run with a small SIMCUDA_MEMORY (4M): the 1 MiB allocation fits, the
 * 16 MiB one fails with CUDA_ERROR_OUT_OF_MEMORY, which memtrace returns unchanged and records
 * as an "oom" trace entry with device_free. */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1 << 20);
  CUdeviceptr big = 0;
  int rc = CU("alloc_big", cuMemAlloc(&big, 16 << 20));
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) printf("OOM %d\n", 16 << 20);
  else if (rc == 0) mt_alloc("dev", big, 16 << 20, 16 << 20);
  CUdeviceptr m = 0;
  rc = CU("alloc_managed_big", cuMemAllocManaged(&m, 32 << 20, CU_MEM_ATTACH_GLOBAL));
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) printf("OOM %d\n", 32 << 20);
  else if (rc == 0) mt_alloc("dev", m, 32 << 20, 32 << 20);
  mt_mem_free("free_a", a);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 2 << 20);
  (void)b;
  mt_done();
  return 0;
}
