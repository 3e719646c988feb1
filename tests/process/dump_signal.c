/* Snapshots on demand while 8 threads keep allocating: the program sends itself the dump signal
 * (MEMTRACE_SIGNAL, default USR2) mid-run, or just runs long enough for MEMTRACE_INTERVAL dumps.
 * Every snapshot must be a consistent cut. argv[1]: "signal" or "interval". */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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

/* On-demand snapshots written so far: "<stem>-<n>.pickle" files beside MEMTRACE_OUTPUT's path
 * (an exit snapshot has one '-' fewer). */
static int on_demand_snapshots(void) {
  const char* out = getenv("MEMTRACE_OUTPUT");
  char dir[4096] = ".";
  if (out && strrchr(out, '/')) {
    size_t n = (size_t)(strrchr(out, '/') - out);
    if (n < sizeof(dir)) {
      memcpy(dir, out, n);
      dir[n] = '\0';
    }
  }
  DIR* d = opendir(dir);
  if (!d) return 0;
  int count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    int dashes = 0;
    for (size_t i = 0; i < len; ++i) dashes += e->d_name[i] == '-';
    if (len > 7 && strcmp(e->d_name + len - 7, ".pickle") == 0 && dashes >= 2) ++count;
  }
  closedir(d);
  return count;
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
  } else if (argc > 3 && strcmp(argv[2], "until") == 0) {
    /* "interval until <n>": run until n interval snapshots are written (at most 120 s), so a
     * loaded machine that writes them slowly still sees them. */
    for (int waited = 0; on_demand_snapshots() < atoi(argv[3]) && waited < 120000; waited += 20) sleep_ms(20);
  } else {
    sleep_ms(argc > 2 ? atol(argv[2]) : 700);  /* "interval <ms>": run longer */
  }
  stop_flag = 1;
  for (int i = 0; i < 8; ++i) pthread_join(t[i], NULL);
  (void)keep;
  mt_done();
  return 0;
}
