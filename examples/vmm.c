/*
 * vmm — CUDA virtual memory management through the driver API.
 *
 * What it shows: memory made the way NCCL and PyTorch's expandable segments make it —
 * cuMemCreate (physical memory) + cuMemAddressReserve (an address range) + cuMemMap +
 * cuMemSetAccess — is recorded by memtrace as a segment at the mapped address, and goes
 * away when it is unmapped and released.
 *
 * Run on the simulated device (no GPU needed):
 *     build/bin/memtrace run --sim -- build/bin/vmm
 * or on a real GPU:
 *     build/bin/memtrace run -- build/bin/vmm
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "device_usage.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    CUresult res_ = (call);                                                          \
    if (res_ != CUDA_SUCCESS) {                                                      \
      const char* name_ = NULL;                                                      \
      if (cuGetErrorName(res_, &name_) != CUDA_SUCCESS) name_ = "unknown error";     \
      fprintf(stderr, "vmm: %s failed: %s (%d)\n", #call, name_, (int)res_);         \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));

  /* Physical memory lives on device 0, pinned, in multiples of the granularity. */
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t size = 4 * granularity;
  printf("granularity %zu bytes; allocating %zu bytes\n", granularity, size);

  CUmemGenericAllocationHandle handle;
  CHECK(cuMemCreate(&handle, size, &prop, 0));
  CUdeviceptr va = 0;
  CHECK(cuMemAddressReserve(&va, size, granularity, 0, 0));
  CHECK(cuMemMap(va, size, 0, handle, 0));

  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, size, &access, 1));
  printf("mapped %zu bytes at 0x%llx\n", size, (unsigned long long)va);

  /* Use it: fill with a pattern and read a part back. */
  CHECK(cuMemsetD32(va, 0xC0FFEEu, size / 4));
  CHECK(cuCtxSynchronize());
  unsigned int check[256];
  CHECK(cuMemcpyDtoH(check, va + size - sizeof(check), sizeof(check)));
  for (int i = 0; i < 256; ++i) {
    if (check[i] != 0xC0FFEEu) {
      fprintf(stderr, "vmm: word %d reads 0x%x, expected 0xc0ffee\n", i, check[i]);
      return 1;
    }
  }
  printf("pattern verified\n");

  /* Tear down in the usual order: unmap, give back the address range, release the memory. */
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemAddressFree(va, size));
  CHECK(cuMemRelease(handle));
  {
    size_t free_b = 0, total_b = 0;
    if (cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) example_report_usage(free_b, total_b);
  }
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("vmm: unmapped and released; nothing left allocated\n");
  return 0;
}
