/* Glue: dlsym of names that are not memtrace's must pass through untouched:
 * cuDNN-style names (absent -> NULL), libc names through RTLD_NEXT, non-memory driver names,
 * the legacy 32-bit cuMemAlloc. Memory names through a libcuda handle get memtrace's wrapper. */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_sym("RTLD_DEFAULT:cudnnCreate", dlsym(RTLD_DEFAULT, "cudnnCreate"));
  mt_sym("RTLD_DEFAULT:cublasLtCreate", dlsym(RTLD_DEFAULT, "cublasLtCreate"));
  mt_sym("RTLD_NEXT:malloc", dlsym(RTLD_NEXT, "malloc"));
  mt_sym("RTLD_DEFAULT:malloc", dlsym(RTLD_DEFAULT, "malloc"));
  mt_sym("RTLD_NEXT:puts", dlsym(RTLD_NEXT, "puts"));
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  mt_sym("h:cudnnCreate", dlsym(h, "cudnnCreate"));
  mt_sym("h:cuDeviceGet", dlsym(h, "cuDeviceGet"));
  mt_sym("h:cuMemGetInfo_v2", dlsym(h, "cuMemGetInfo_v2"));
  mt_sym("h:cuMemAlloc", dlsym(h, "cuMemAlloc"));
  mt_sym("h:cuMemAlloc_v2", dlsym(h, "cuMemAlloc_v2"));
  mt_sym("h:cuMemCreate", dlsym(h, "cuMemCreate"));
  mt_sym("h:cuGetProcAddress", dlsym(h, "cuGetProcAddress"));
  mt_sym("h:cuGetProcAddress_v2", dlsym(h, "cuGetProcAddress_v2"));
  mt_sym("h:cuNoSuchFunction", dlsym(h, "cuNoSuchFunction"));
  mt_sym("h:ncclMemAlloc", dlsym(h, "ncclMemAlloc"));
  mt_done();
  return 0;
}
