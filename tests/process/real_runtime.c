/* The toolkit's real libcudart.so.13 on the simulated driver: it resolves every driver entry
 * point through cuGetProcAddress_v2 (through memtrace's hooks), then fails at cuGetExportTable,
 * which the simulation does not serve, so cudaMalloc returns cudaErrorInitializationError (3).
 * run_case.py checks from MEMTRACE_DEBUG and SIMCUDA_LOG which pointers the runtime was given. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  void* p = NULL;
  cudaError_t rc = cudaMalloc(&p, 1 << 20);
  printf("RC cudaMalloc %d\n", (int)rc);
  if (rc == cudaSuccess) cudaFree(p);
  printf("DONE\n");
  return 0;
}
