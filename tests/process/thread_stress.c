/* Threads: 10 threads allocate and free concurrently; no event may be lost.
 * Each thread keeps up to 4 allocations outstanding and frees everything before it ends. */
#include <pthread.h>

#include "mt_case.h"

#define THREADS 10
#define ITERS 300

static CUcontext g_ctx;
static int g_allocs[THREADS], g_frees[THREADS], g_failures[THREADS];

static void* worker(void* arg) {
  int t = (int)(intptr_t)arg;
  cuCtxSetCurrent(g_ctx);
  CUdeviceptr live[4] = {0, 0, 0, 0};
  for (int i = 0; i < ITERS; ++i) {
    int slot = i % 4;
    if (live[slot]) {
      if (cuMemFree(live[slot]) == CUDA_SUCCESS) ++g_frees[t];
      else ++g_failures[t];
      live[slot] = 0;
    }
    size_t bytes = 256 + (size_t)t * 4096 + (size_t)i * 64;
    if (cuMemAlloc(&live[slot], bytes) == CUDA_SUCCESS) ++g_allocs[t];
    else ++g_failures[t];
  }
  for (int slot = 0; slot < 4; ++slot)
    if (live[slot]) {
      if (cuMemFree(live[slot]) == CUDA_SUCCESS) ++g_frees[t];
      else ++g_failures[t];
    }
  return NULL;
}

int main(void) {
  mt_init();
  mt_setup(0);
  MUST("cuCtxGetCurrent", cuCtxGetCurrent(&g_ctx));
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; ++t) pthread_create(&th[t], NULL, worker, (void*)(intptr_t)t);
  for (int t = 0; t < THREADS; ++t) pthread_join(th[t], NULL);
  int allocs = 0, frees = 0, failures = 0;
  for (int t = 0; t < THREADS; ++t) {
    allocs += g_allocs[t];
    frees += g_frees[t];
    failures += g_failures[t];
  }
  printf("COUNT alloc %d\nCOUNT free %d\nCOUNT failures %d\n", allocs, frees, failures);
  mt_done();
  return failures ? 1 : 0;
}
