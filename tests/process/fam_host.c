/* Family: pinned host memory — cuMemAllocHost_v2, cuMemHostAlloc, cuMemHostRegister_v2,
 * cuMemFreeHost, cuMemHostUnregister. Recorded in host_segments / host_traces, never as device
 * segments. */
#include "mt_case.h"

static void* host_alloc(const char* label, size_t bytes, int portable) {
  void* p = NULL;
  int rc = portable ? CU(label, cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE)) : CU(label, cuMemAllocHost(&p, bytes));
  if (rc != 0) return NULL;
  mt_alloc("host", (uintptr_t)p, bytes, bytes);
  memset(p, 0x11, bytes);
  return p;
}

static void* host_register(const char* label, size_t bytes) {
  void* p = NULL;
  if (posix_memalign(&p, 4096, bytes) != 0) return NULL;
  if (CU(label, cuMemHostRegister(p, bytes, 0)) != 0) {
    free(p);
    return NULL;
  }
  mt_alloc("host", (uintptr_t)p, bytes, bytes);
  return p;
}

int main(void) {
  mt_init();
  mt_setup(0);
  void* a = host_alloc("alloc_host_a", 65536, 0);
  void* b = host_alloc("alloc_host_b", 10000, 0);
  void* c = host_alloc("host_alloc_c", 131072, 1);
  void* d = host_alloc("host_alloc_d", 4096, 1);
  void* r = host_register("register_r", 262144);
  void* s = host_register("register_s", 8192);
  /* a device allocation too, so the device side is not empty */
  CUdeviceptr g = mt_mem_alloc("alloc_dev_g", 1 << 20);
  if (b && CU("free_host_b", cuMemFreeHost(b)) == 0) mt_free("host", (uintptr_t)b);
  if (d && CU("free_host_d", cuMemFreeHost(d)) == 0) mt_free("host", (uintptr_t)d);
  if (s && CU("unregister_s", cuMemHostUnregister(s)) == 0) mt_free("host", (uintptr_t)s);
  (void)a;
  (void)c;
  (void)r;
  (void)g;
  mt_done();
  return 0;
}
