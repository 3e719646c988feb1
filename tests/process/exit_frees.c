/* Frees at exit, in the order real programs make them:
 *   - free_at_exit, an atexit handler registered before the first CUDA call (as C++ global
 *     destructors and early atexit handlers are), frees a 48 MiB buffer: the program's own free,
 *     which runs after memtrace's atexit handler;
 *   - cudaDeviceReset, registered first so it runs last, stands for the CUDA runtime's own
 *     teardown, called by the C library's exit code: it takes everything down.
 * The exit snapshot must show the 1 MiB the program really leaked, and nothing else. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static void* g_buffer;

static void free_at_exit(void) {
  cudaError_t e = cudaFree(g_buffer);
  printf("EXITFREE %d\n", (int)e);
  fflush(stdout);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  atexit((void (*)(void))cudaDeviceReset);
  atexit(free_at_exit);
  void* leaked = NULL;
  if (cudaMalloc(&g_buffer, 48u << 20) != cudaSuccess || cudaMalloc(&leaked, 1u << 20) != cudaSuccess) {
    printf("STOP cudaMalloc\n");
    return 3;
  }
  printf("BUFFER %p\nLEAKED %p\nDONE\n", g_buffer, leaked);
  return 0;
}
