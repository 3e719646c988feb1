/*
 * nccl_allreduce — one process, every visible GPU, one all-reduce.
 *
 * What it shows: NCCL's own device memory. Creating the communicators makes NCCL allocate
 * internal buffers (through its private copy of the CUDA runtime, invisible to symbol
 * interposition); memtrace still records them, labelled with the category "nccl". The
 * user buffers come from ncclMemAlloc and are registered with ncclCommRegister.
 *
 * Run on the simulated device, with two simulated GPUs:
 *     SIMCUDA_DEVICES=2 build/bin/memtrace run --sim -- build/bin/nccl_allreduce
 * or on real GPUs:
 *     build/bin/memtrace run -- build/bin/nccl_allreduce
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include "device_usage.h"

#define CHECK_CUDA(call)                                                                               \
  do {                                                                                                 \
    cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "nccl_allreduce: %s failed: %s (%d)\n", #call, cudaGetErrorString(err_), (int)err_); \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

#define CHECK_NCCL(call)                                                                               \
  do {                                                                                                 \
    ncclResult_t res_ = (call);                                                                        \
    if (res_ != ncclSuccess) {                                                                         \
      fprintf(stderr, "nccl_allreduce: %s failed: %s (%d)\n", #call, ncclGetErrorString(res_), (int)res_); \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

#define MAX_DEVICES 16
#define COUNT (256 * 1024) /* floats per rank: 1 MiB */

int main(void) {
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev > MAX_DEVICES) ndev = MAX_DEVICES;
  printf("%d device(s)\n", ndev);

  ncclComm_t comms[MAX_DEVICES];
  CHECK_NCCL(ncclCommInitAll(comms, ndev, NULL));

  float* bufs[MAX_DEVICES];
  void* regs[MAX_DEVICES];
  cudaStream_t streams[MAX_DEVICES];
  static float host[COUNT];
  const size_t bytes = COUNT * sizeof(float);

  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamCreate(&streams[d]));
    CHECK_NCCL(ncclMemAlloc((void**)&bufs[d], bytes));
    CHECK_NCCL(ncclCommRegister(comms[d], bufs[d], bytes, &regs[d]));
    /* Rank d contributes the value d + 1 everywhere. */
    for (int i = 0; i < COUNT; ++i) host[i] = (float)(d + 1);
    CHECK_CUDA(cudaMemcpy(bufs[d], host, bytes, cudaMemcpyHostToDevice));
  }

  /* One thread driving several devices: the calls go inside a group. */
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < ndev; ++d)
    CHECK_NCCL(ncclAllReduce(bufs[d], bufs[d], COUNT, ncclFloat, ncclSum, comms[d], streams[d]));
  CHECK_NCCL(ncclGroupEnd());

  const float expected = (float)ndev * (float)(ndev + 1) / 2.0f;
  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamSynchronize(streams[d]));
    CHECK_CUDA(cudaMemcpy(host, bufs[d], bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < COUNT; i += 997) {
      if (host[i] != expected) {
        fprintf(stderr, "nccl_allreduce: device %d element %d is %g, expected %g\n", d, i, host[i], expected);
        return 1;
      }
    }
  }
  printf("all-reduce of %d x %zu bytes: every element is %g, as expected\n", ndev, bytes, expected);

  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_NCCL(ncclCommDeregister(comms[d], regs[d]));
    CHECK_NCCL(ncclMemFree(bufs[d]));
    CHECK_CUDA(cudaStreamDestroy(streams[d]));
  }
  for (int d = 0; d < ndev; ++d) CHECK_NCCL(ncclCommDestroy(comms[d]));
  printf("nccl_allreduce: buffers freed, communicators destroyed\n");
  {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) example_report_usage(free_b, total_b);
  }
  return 0;
}
