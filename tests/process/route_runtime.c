/* Route: through the (simulated) CUDA runtime: cudaMalloc/cudaFree, and a driver entry point
 * obtained with cudaGetDriverEntryPointByVersion (the runtime's master resolver, which memtrace
 * took over at the runtime's self-lookup of "cuGetProcAddress"). */
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include "mt_case.h"

int main(void) {
  mt_init();
  void* a = NULL;
  void* b = NULL;
  if (CU("cudaMalloc_a", cudaMalloc(&a, 3 << 20)) == 0) mt_alloc("dev", (uintptr_t)a, 3 << 20, 3 << 20);
  if (CU("cudaMalloc_b", cudaMalloc(&b, 1000)) == 0) mt_alloc("dev", (uintptr_t)b, 1000, 1000);
  if (a && CU("cudaFree_a", cudaFree(a)) == 0) mt_free("dev", (uintptr_t)a);

  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  CU("cudaGetDriverEntryPointByVersion", cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 3020,
                                                                         cudaEnableDefault, &status));
  printf("STATUS entry_point %d\n", (int)status);
  mt_sym("cuMemAlloc@runtime", fn);
  if (fn && status == cudaDriverEntryPointSuccess) {
    CUdeviceptr c = 0;
    if (CU("alloc_c_entry_point", ((PFN_cuMemAlloc_v3020)fn)(&c, 2 << 20)) == 0) mt_alloc("dev", c, 2 << 20, 2 << 20);
  }
  CU("cudaDeviceSynchronize", cudaDeviceSynchronize());
  mt_done();
  return 0;
}
