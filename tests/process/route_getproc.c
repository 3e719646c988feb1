/* Route: what the CUDA runtime (shared or static) and cuda-python do:
 *   dlsym(h, "cuGetProcAddress_v2"), the "" probe, cuInit@2000, self-lookups of
 *   "cuGetProcAddress" at 11030 (4 arguments) and 12000 (5 arguments), then base-name lookups
 *   through the 12000 pointer, with and without CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. */
#include <cudaTypedefs.h>

#include "mt_case.h"

static PFN_cuGetProcAddress_v12000 resolver;

static void* lookup(const char* label, const char* name, int version, cuuint64_t flags) {
  void* fn = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  int rc = CU(label, resolver(name, &fn, version, flags, &status));
  printf("STATUS %s %d\n", label, (int)status);
  mt_sym(label, fn);
  return rc == 0 && status == CU_GET_PROC_ADDRESS_SUCCESS ? fn : NULL;
}

int main(void) {
  mt_init();
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  PFN_cuGetProcAddress_v12000 first = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  mt_sym("dlsym_cuGetProcAddress_v2", (void*)first);
  if (!first) {
    printf("STOP dlsym\n");
    return 3;
  }
  /* The empty-name probe: a stub library would answer CUDA_ERROR_STUB_LIBRARY. */
  void* probe = NULL;
  CU("probe", first("", &probe, 0, 0, NULL));

  resolver = first;
  PFN_cuInit_v2000 init = (PFN_cuInit_v2000)lookup("cuInit@2000", "cuInit", 2000, 0);
  PFN_cuGetProcAddress_v11030 gpa11030 =
      (PFN_cuGetProcAddress_v11030)lookup("cuGetProcAddress@11030", "cuGetProcAddress", 11030, 0);
  PFN_cuGetProcAddress_v12000 gpa12000 =
      (PFN_cuGetProcAddress_v12000)lookup("cuGetProcAddress@12000", "cuGetProcAddress", 12000, 0);
  if (!init || !gpa11030 || !gpa12000) {
    printf("STOP resolver\n");
    return 3;
  }
  resolver = gpa12000; /* the master resolver from now on, as in the runtime */

  const cuuint64_t PTDS = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  PFN_cuDeviceGet_v2000 device_get = (PFN_cuDeviceGet_v2000)lookup("cuDeviceGet", "cuDeviceGet", 2000, 0);
  PFN_cuDevicePrimaryCtxRetain_v7000 retain =
      (PFN_cuDevicePrimaryCtxRetain_v7000)lookup("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, 0);
  PFN_cuCtxSetCurrent_v4000 set_current =
      (PFN_cuCtxSetCurrent_v4000)lookup("cuCtxSetCurrent", "cuCtxSetCurrent", 4000, 0);
  PFN_cuMemAlloc_v3020 alloc = (PFN_cuMemAlloc_v3020)lookup("cuMemAlloc", "cuMemAlloc", 3020, 0);
  PFN_cuMemFree_v3020 mfree = (PFN_cuMemFree_v3020)lookup("cuMemFree", "cuMemFree", 3020, 0);
  PFN_cuMemAllocAsync_v11020 alloc_async =
      (PFN_cuMemAllocAsync_v11020)lookup("cuMemAllocAsync", "cuMemAllocAsync", 11020, 0);
  PFN_cuMemAllocAsync_v11020_ptsz alloc_async_ptsz =
      (PFN_cuMemAllocAsync_v11020_ptsz)lookup("cuMemAllocAsync+ptds", "cuMemAllocAsync", 11020, PTDS);
  PFN_cuMemFreeAsync_v11020 free_async =
      (PFN_cuMemFreeAsync_v11020)lookup("cuMemFreeAsync", "cuMemFreeAsync", 11020, 0);
  PFN_cuMemFreeAsync_v11020_ptsz free_async_ptsz =
      (PFN_cuMemFreeAsync_v11020_ptsz)lookup("cuMemFreeAsync+ptds", "cuMemFreeAsync", 11020, PTDS);
  PFN_cuStreamSynchronize_v2000 sync =
      (PFN_cuStreamSynchronize_v2000)lookup("cuStreamSynchronize", "cuStreamSynchronize", 2000, 0);
  /* Lookups that must fail the same way with and without memtrace. */
  lookup("cuNoSuchFunction", "cuNoSuchFunction", 12000, 0);
  lookup("cuMemAlloc@99999", "cuMemAlloc", 99999, 0);

  /* The 11030 resolver (4 arguments) is a resolver too. */
  PFN_cuMemAlloc_v3020 alloc_old = NULL;
  CU("gpa11030(cuMemAlloc)", gpa11030("cuMemAlloc", (void**)&alloc_old, 3020, 0));
  mt_sym("cuMemAlloc@gpa11030", (void*)alloc_old);

  if (!device_get || !retain || !set_current || !alloc || !mfree || !alloc_async || !alloc_async_ptsz ||
      !free_async || !free_async_ptsz || !sync || !alloc_old) {
    printf("STOP lookups\n");
    return 3;
  }
  CUdevice dev;
  CUcontext ctx;
  MUST("cuInit", init(0));
  MUST("cuDeviceGet", device_get(&dev, 0));
  MUST("cuDevicePrimaryCtxRetain", retain(&ctx, dev));
  MUST("cuCtxSetCurrent", set_current(ctx));

  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  if (CU("alloc_a", alloc(&a, 1 << 20)) == 0) mt_alloc("dev", a, 1 << 20, 1 << 20);
  if (CU("alloc_b_old", alloc_old(&b, 512 << 10)) == 0) mt_alloc("dev", b, 512 << 10, 512 << 10);
  if (CU("alloc_c_async", alloc_async(&c, 256 << 10, 0)) == 0) mt_alloc("dev", c, 256 << 10, 256 << 10);
  if (CU("alloc_d_async_ptsz", alloc_async_ptsz(&d, 128 << 10, 0)) == 0) mt_alloc("dev", d, 128 << 10, 128 << 10);
  CU("sync", sync(0));
  if (a && CU("free_a", mfree(a)) == 0) mt_free("dev", a);
  if (c && CU("free_c_async", free_async(c, 0)) == 0) mt_free("dev", c);
  CU("sync", sync(0));
  /* b and d stay allocated */
  mt_done();
  return 0;
}
