/* Route: NCCL. Communicator creation makes NCCL allocate internal VMM buffers through its
 * private copy of the runtime's driver resolution (no exported symbol is called), and they
 * must still be recorded, with category "nccl", and freed by ncclCommDestroy.
 * ncclMemAlloc buffers are user memory; the one on the last device is leaked on purpose.
 * Run with SIMCUDA_DEVICES=2. */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "mt_case.h"

#define MAXDEV 8
#define COUNT 4096

int main(void) {
  mt_init();
  int ndev = 0;
  MUST("cudaGetDeviceCount", cudaGetDeviceCount(&ndev));
  if (ndev > MAXDEV) ndev = MAXDEV;
  printf("COUNT devices %d\n", ndev);
  ncclComm_t comms[MAXDEV];
  MUST("ncclCommInitAll", ncclCommInitAll(comms, ndev, NULL));

  float* bufs[MAXDEV];
  void* regs[MAXDEV];
  const size_t bytes = COUNT * sizeof(float);
  static float host[COUNT];
  for (int d = 0; d < ndev; ++d) {
    MUST("cudaSetDevice", cudaSetDevice(d));
    MUST("ncclMemAlloc", ncclMemAlloc((void**)&bufs[d], bytes));
    /* ncclMemAlloc rounds up to the VMM granularity: the mapping is the segment. */
    CUdeviceptr base = 0;
    size_t span = 0;
    MUST("cuMemGetAddressRange", cuMemGetAddressRange(&base, &span, (CUdeviceptr)(uintptr_t)bufs[d]));
    mt_alloc("dev", base, bytes, span);
    printf("DEVICE 0x%llx %d\n", (unsigned long long)base, d);
    MUST("ncclCommRegister", ncclCommRegister(comms[d], bufs[d], bytes, &regs[d]));
    for (int i = 0; i < COUNT; ++i) host[i] = (float)(d + 1);
    MUST("cudaMemcpy", cudaMemcpy(bufs[d], host, bytes, cudaMemcpyHostToDevice));
  }
  MUST("ncclGroupStart", ncclGroupStart());
  for (int d = 0; d < ndev; ++d)
    MUST("ncclAllReduce", ncclAllReduce(bufs[d], bufs[d], COUNT, ncclFloat, ncclSum, comms[d], 0));
  MUST("ncclGroupEnd", ncclGroupEnd());
  const float expected = (float)(ndev * (ndev + 1) / 2);
  for (int d = 0; d < ndev; ++d) {
    MUST("cudaSetDevice", cudaSetDevice(d));
    MUST("cudaDeviceSynchronize", cudaDeviceSynchronize());
    MUST("cudaMemcpy", cudaMemcpy(host, bufs[d], bytes, cudaMemcpyDeviceToHost));
    if (host[0] != expected || host[COUNT - 1] != expected) {
      printf("STOP allreduce result %g, expected %g\n", host[0], expected);
      return 4;
    }
  }
  for (int d = 0; d < ndev; ++d) {
    MUST("cudaSetDevice", cudaSetDevice(d));
    MUST("ncclCommDeregister", ncclCommDeregister(comms[d], regs[d]));
    if (d + 1 < ndev) {
      MUST("ncclMemFree", ncclMemFree(bufs[d]));
      mt_free("dev", (uintptr_t)bufs[d]);
    }
  }
  for (int d = 0; d < ndev; ++d) MUST("ncclCommDestroy", ncclCommDestroy(comms[d]));
  mt_done();
  return 0;
}
