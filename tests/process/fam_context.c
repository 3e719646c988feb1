/* Family: context destruction frees what the context owned (linear memory) and nothing else — cuCtxDestroy_v2 of a
 * created context, cuDevicePrimaryCtxReset_v2 of the primary one. The program prints FREE for
 * the memory the driver took back. */
#include "mt_case.h"

int main(void) {
  mt_init();
  CUdevice dev = mt_setup(0);
  CUcontext primary = NULL;
  MUST("cuCtxGetCurrent", cuCtxGetCurrent(&primary));

  /* A created context with two allocations, destroyed. */
  CUcontext ctx = NULL;
  if (CU("cuCtxCreate", cuCtxCreate(&ctx, NULL, 0, dev)) == 0) {
    CUdeviceptr x1 = mt_mem_alloc("alloc_x1", 1 << 20);
    CUdeviceptr x2 = mt_mem_alloc("alloc_x2", 4000);
    CUdeviceptr x3 = mt_mem_alloc("alloc_x3", 8192);
    mt_mem_free("free_x3", x3);
    /* VMM physical memory and pool allocations belong to no context (cuda.h, cuCtxDestroy):
     * they survive its destruction and stay live. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    if (CU("granularity", cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) == 0 &&
        CU("cuMemCreate", cuMemCreate(&h, gran, &prop, 0)) == 0 &&
        CU("cuMemAddressReserve", cuMemAddressReserve(&va, gran, 0, 0, 0)) == 0 &&
        CU("cuMemMap", cuMemMap(va, gran, 0, h, 0)) == 0)
      mt_alloc("dev", va, gran, gran);
    CUdeviceptr pooled = 0;
    if (CU("cuMemAllocAsync", cuMemAllocAsync(&pooled, 12345, 0)) == 0) mt_alloc("dev", pooled, 12345, 12345);
    if (CU("cuCtxDestroy", cuCtxDestroy(ctx)) == 0) {
      if (x1) mt_free("dev", x1);
      if (x2) mt_free("dev", x2);
    }
  }
  MUST("cuCtxSetCurrent_primary", cuCtxSetCurrent(primary));

  /* The primary context with one allocation, reset. */
  CUdeviceptr y1 = mt_mem_alloc("alloc_y1", 2 << 20);
  if (CU("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset(dev)) == 0) {
    if (y1) mt_free("dev", y1);
  }

  /* A fresh primary context: this allocation outlives the program (a leak). */
  CUcontext again = NULL;
  MUST("cuDevicePrimaryCtxRetain_again", cuDevicePrimaryCtxRetain(&again, dev));
  MUST("cuCtxSetCurrent_again", cuCtxSetCurrent(again));
  CUdeviceptr z = mt_mem_alloc("alloc_z", 65536);
  (void)z;
  mt_done();
  return 0;
}
