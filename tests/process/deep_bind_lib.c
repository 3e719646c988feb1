/* A library that calls the driver directly, linked against libcuda.so.1: opened with
 * RTLD_DEEPBIND it binds cuMemAlloc_v2 / cuMemFree_v2 in its own dependency scope, to the driver,
 * past memtrace (deep_bind.c). Built twice: bound at load with read-only GOT (-z now -z relro),
 * and lazily bound (-z lazy). */
#include <cuda.h>

__attribute__((visibility("default"))) int deep_alloc(size_t n, CUdeviceptr* p) { return (int)cuMemAlloc(p, n); }

__attribute__((visibility("default"))) int deep_free(CUdeviceptr p) { return (int)cuMemFree(p); }
