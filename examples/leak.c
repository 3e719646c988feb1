/*
 * leak — a program that forgets to free some of its device memory.
 *
 * What it shows: allocations still alive when the program exits are reported by memtrace's
 * summary on stderr ("live at exit": count and bytes, grouped by the code that asked for
 * them), and they are the segments left in the snapshot, each with the call stack that made
 * it. Three buffers are made through the CUDA runtime; one is freed, two leak:
 *   - "lookup table"  (8 MiB, allocated in load_lookup_table, never freed)
 *   - "scratch"       (1 MiB, allocated in make_scratch, never freed)
 * The 32 MiB "workspace" is freed properly.
 *
 * Run on the simulated device (no GPU needed):
 *     build/bin/memtrace run --sim -- build/bin/leak
 * or on a real GPU:
 *     build/bin/memtrace run -- build/bin/leak
 * Then open memtrace-<pid>.pickle at https://pytorch.org/memory_viz
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include "device_usage.h"

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      fprintf(stderr, "leak: %s failed: %s (%d)\n", #call, cudaGetErrorString(err_), (int)err_); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define MiB ((size_t)1 << 20)

static void* allocate(const char* what, size_t bytes) {
  void* p = NULL;
  CHECK(cudaMalloc(&p, bytes));
  printf("allocated %-13s %8zu bytes at %p\n", what, bytes, p);
  return p;
}

/* Kept "for later" and then forgotten: a leak. */
static void* load_lookup_table(void) {
  void* table = allocate("lookup table", 8 * MiB);
  CHECK(cudaMemset(table, 0, 8 * MiB));
  return table;
}

/* A scratch buffer whose pointer is simply dropped: another leak. */
static void make_scratch(void) {
  void* scratch = allocate("scratch", 1 * MiB);
  CHECK(cudaMemset(scratch, 0xff, 1 * MiB));
}

/* Done right: allocated, used, freed. */
static void run_with_workspace(void) {
  void* workspace = allocate("workspace", 32 * MiB);
  CHECK(cudaMemset(workspace, 0, 32 * MiB));
  CHECK(cudaFree(workspace));
  printf("freed     %-13s %8zu bytes at %p\n", "workspace", 32 * MiB, workspace);
}

int main(void) {
  void* table = load_lookup_table();
  make_scratch();
  run_with_workspace();
  CHECK(cudaDeviceSynchronize());
  (void)table; /* never freed */
  printf("leak: exiting with 2 buffers (9 MiB) still allocated\n");
  {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) example_report_usage(free_b, total_b);
  }
  return 0;
}
