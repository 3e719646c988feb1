/* Snapshots on demand while 8 threads keep allocating: the program sends itself the dump signal
 * (MEMTRACE_SIGNAL, default USR2) mid-run, or just runs long enough for MEMTRACE_INTERVAL dumps.
 * Every snapshot must be a consistent cut. argv[1]: "signal" or "interval". */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "mt_case.h"

static volatile int stop_flag = 0;
static CUcontext g_ctx;

static void* churn(void* arg) {
  (void)arg;
  cuCtxSetCurrent(g_ctx);
  CUdeviceptr held[16] = {0};
  unsigned i = 0;
  /* Bounded, so the history stays small enough for the checker to replay quickly. */
  while (!stop_flag && i < 3000) {
    if (i % 64 == 63) {
      struct timespec ts = {0, 200000L};
      nanosleep(&ts, NULL);
    }
    unsigned slot = i % 16;
    if (held[slot]) cuMemFree(held[slot]);
    held[slot] = 0;
    cuMemAlloc(&held[slot], 512 + (i % 7) * 4096);
    ++i;
  }
  for (int k = 0; k < 16; ++k)
    if (held[k]) cuMemFree(held[k]);
  return NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char** argv) {
  mt_init();
  CUdevice dev = mt_setup(0);
  (void)dev;
  MUST("cuCtxGetCurrent", cuCtxGetCurrent(&g_ctx));
  CUdeviceptr keep = mt_mem_alloc("keep", 3 << 20);
  pthread_t t[8];
  for (int i = 0; i < 8; ++i) pthread_create(&t[i], NULL, churn, NULL);
  if (argc > 1 && strcmp(argv[1], "signal") == 0) {
    sleep_ms(150);
    kill(getpid(), SIGUSR2);
    sleep_ms(400);
  } else {
    sleep_ms(argc > 2 ? atol(argv[2]) : 700);  /* "interval <ms>": run longer */
  }
  stop_flag = 1;
  for (int i = 0; i < 8; ++i) pthread_join(t[i], NULL);
  (void)keep;
  mt_done();
  return 0;
}
