/* Threads: exit() called from a thread that is not the main one; the snapshot must still be
 * written and hold that thread's allocations. */
#include <pthread.h>

#include "mt_case.h"

static CUcontext g_ctx;

static void* worker(void* arg) {
  (void)arg;
  cuCtxSetCurrent(g_ctx);
  mt_mem_alloc("thread_alloc_a", 1 << 20);
  CUdeviceptr b = mt_mem_alloc("thread_alloc_b", 12345);
  (void)b;
  mt_done();
  exit(0);
  return NULL;
}

int main(void) {
  mt_init();
  mt_setup(0);
  MUST("cuCtxGetCurrent", cuCtxGetCurrent(&g_ctx));
  mt_mem_alloc("main_alloc", 4096);
  pthread_t th;
  pthread_create(&th, NULL, worker, NULL);
  pthread_join(th, NULL); /* never returns: the worker ends the process */
  printf("STOP main resumed\n");
  return 5;
}
