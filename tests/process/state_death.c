/* Ways for a program to end without writing memtrace's exit snapshot, each after it has told
 * (mt_case.h lines, one whole line per write) what it holds:
 *   threads   8 threads allocate and free flat out until the process is killed from outside; each
 *             prints FREEING before a free it has started and FREE after it returned, ALLOC after
 *             an allocation returned, each with its thread (another thread may be handed an
 *             address before the freeing one has said FREE)
 *   segv | abort | term | term_handler | exit   a few allocations, then a null write, abort(),
 *             raise(SIGTERM) with no handler / with the program's own (it prints HANDLED and
 *             _exits 3), or _exit(5)
 *   hold      the same allocations, then READY, and it waits for its stdin to close (for `memtrace
 *             top` to look at a process that holds still), then ends normally
 * The driver (run_case.py) recovers the state file and compares its live set with these lines. */
#include <pthread.h>
#include <signal.h>

#include "mt_case.h"

static CUcontext g_ctx;

static void* worker(void* arg) {
  cuCtxSetCurrent(g_ctx);
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  CUdeviceptr held[16];
  int n = 0;
  for (;;) {
    seed = seed * 1103515245u + 12345u;
    if (n < 16 && (n == 0 || (seed >> 16) % 3 != 0)) {
      size_t size = 512u * (1u + (seed >> 8) % 64u);
      CUdeviceptr p = 0;
      if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS) continue;
      printf("ALLOC dev 0x%llx %zu %zu T%u\n", (unsigned long long)p, size, size, (unsigned)(uintptr_t)arg);
      held[n++] = p;
    } else {
      CUdeviceptr p = held[--n];
      printf("FREEING dev 0x%llx T%u\n", (unsigned long long)p, (unsigned)(uintptr_t)arg);
      cuMemFree_v2(p);
      printf("FREE dev 0x%llx T%u\n", (unsigned long long)p, (unsigned)(uintptr_t)arg);
    }
  }
  return NULL;
}

static void on_term(int sig) {
  (void)sig;
  static const char msg[] = "HANDLED\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(3);
}

int main(int argc, char** argv) {
  mt_init();
  const char* mode = argc > 1 ? argv[1] : "threads";
  if (strcmp(mode, "term_handler") == 0) signal(SIGTERM, on_term);
  mt_setup(0);
  cuCtxGetCurrent(&g_ctx);
  printf("PID %d\n", (int)getpid());
  if (strcmp(mode, "threads") == 0) {
    pthread_t t[8];
    for (int i = 0; i < 8; ++i) pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)(i + 1));
    for (int i = 0; i < 8; ++i) pthread_join(t[i], NULL);
    return 0;
  }
  CUdeviceptr keep[4];
  for (int i = 0; i < 4; ++i) {
    cuMemAlloc_v2(&keep[i], (size_t)(i + 1) << 20);
    mt_alloc("dev", keep[i], (uint64_t)(i + 1) << 20, (uint64_t)(i + 1) << 20);
  }
  cuMemFree_v2(keep[1]);
  mt_free("dev", keep[1]);
  fflush(stdout);
  if (strcmp(mode, "segv") == 0) *(volatile int*)(uintptr_t)argc = 0;  /* argc is 2: a null page */
  if (strcmp(mode, "abort") == 0) abort();
  if (strcmp(mode, "term") == 0 || strcmp(mode, "term_handler") == 0) raise(SIGTERM);
  if (strcmp(mode, "exit") == 0) _exit(5);
  if (strcmp(mode, "hold") == 0) {
    char c;
    printf("READY\n");
    fflush(stdout);
    while (read(0, &c, 1) > 0) {
    }
  }
  printf("SURVIVED\n");
  return 0;
}
