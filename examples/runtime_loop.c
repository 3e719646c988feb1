/*
 * runtime_loop — the everyday CUDA runtime memory calls, in a loop.
 *
 * What it shows: a timeline of allocations of varying sizes in the snapshot; every
 * cudaMalloc/cudaFree pair becomes segment_alloc/alloc ... free_requested/free_completed/
 * segment_free entries; the stream-ordered pair (cudaMallocAsync/cudaFreeAsync) and pinned
 * host memory (cudaMallocHost/cudaFreeHost, which memtrace records under host_segments /
 * host_traces) show up too. Nothing leaks, so the summary reports no live memory.
 *
 * Run on the simulated device (no GPU needed):
 *     build/bin/memtrace run --sim -- build/bin/runtime_loop
 * or on a real GPU:
 *     build/bin/memtrace run -- build/bin/runtime_loop
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "device_usage.h"

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "runtime_loop: %s failed: %s (%d)\n", #call, cudaGetErrorString(err_), (int)err_); \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

#define KiB ((size_t)1 << 10)

int main(void) {
  /* Pinned host staging buffer, large enough for the biggest iteration. */
  const size_t max_bytes = 4096 * KiB;
  unsigned char* host = NULL;
  CHECK(cudaMallocHost((void**)&host, max_bytes));

  size_t total = 0;
  for (int i = 0; i < 12; ++i) {
    /* 64 KiB, 128 KiB, ... 4 MiB, then down again: a saw-tooth of sizes. */
    int step = i < 7 ? i : 12 - i;
    size_t bytes = (64 * KiB) << step;
    void* dev = NULL;
    CHECK(cudaMalloc(&dev, bytes));
    CHECK(cudaMemset(dev, i + 1, bytes));
    CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < bytes; k += 4093) {
      if (host[k] != (unsigned char)(i + 1)) {
        fprintf(stderr, "runtime_loop: iteration %d: byte %zu is %d, expected %d\n", i, k, host[k], i + 1);
        return 1;
      }
    }
    memset(host, 0x5a, bytes);
    CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaFree(dev));
    total += bytes;
    printf("iteration %2d: %8zu bytes allocated, filled, copied back and freed\n", i, bytes);
  }

  /* Stream-ordered allocation on the default stream. */
  void* async_buf = NULL;
  const size_t async_bytes = 2048 * KiB;
  CHECK(cudaMallocAsync(&async_buf, async_bytes, 0));
  CHECK(cudaMemsetAsync(async_buf, 0, async_bytes, 0));
  CHECK(cudaFreeAsync(async_buf, 0));
  CHECK(cudaStreamSynchronize(0));
  printf("stream-ordered: %zu bytes allocated and freed on the default stream\n", async_bytes);

  CHECK(cudaFreeHost(host));
  printf("runtime_loop: %zu bytes went through 12 device buffers; %zu bytes of pinned host memory freed\n",
         total, max_bytes);
  {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) example_report_usage(free_b, total_b);
  }
  return 0;
}
