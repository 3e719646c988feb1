/* Route: dlopen("libcuda.so.1") + dlsym of exact versioned names (what XLA's stub, numba and
 * ctypes users do). No link-time dependency on libcuda. */
#include "mt_case.h"

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice*, int);
typedef CUresult (*retain_fn)(CUcontext*, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

int main(void) {
  mt_init();
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  init_fn init = (init_fn)dlsym(h, "cuInit");
  device_get_fn device_get = (device_get_fn)dlsym(h, "cuDeviceGet");
  retain_fn retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
  set_current_fn set_current = (set_current_fn)dlsym(h, "cuCtxSetCurrent");
  alloc_fn alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
  free_fn mfree = (free_fn)dlsym(h, "cuMemFree_v2");
  mt_sym("cuInit", (void*)init);
  mt_sym("cuDeviceGet", (void*)device_get);
  mt_sym("cuMemAlloc_v2", (void*)alloc);
  mt_sym("cuMemFree_v2", (void*)mfree);
  mt_sym("cuMemAlloc_legacy", dlsym(h, "cuMemAlloc")); /* 32-bit ABI: never ours */
  if (!init || !device_get || !retain || !set_current || !alloc || !mfree) {
    printf("STOP dlsym\n");
    return 3;
  }
  CUdevice dev;
  CUcontext ctx;
  MUST("cuInit", init(0));
  MUST("cuDeviceGet", device_get(&dev, 0));
  MUST("cuDevicePrimaryCtxRetain", retain(&ctx, dev));
  MUST("cuCtxSetCurrent", set_current(ctx));

  CUdeviceptr a = 0, b = 0;
  if (CU("alloc_a", alloc(&a, 2 << 20)) == 0) mt_alloc("dev", a, 2 << 20, 2 << 20);
  if (CU("alloc_b", alloc(&b, 4096)) == 0) mt_alloc("dev", b, 4096, 4096);
  if (a && CU("free_a", mfree(a)) == 0) mt_free("dev", a);
  mt_done();
  return 0;
}
