/* Family: linear device memory — cuMemAlloc_v2, cuMemAllocPitch_v2 (segment = pitch x height),
 * cuMemFree_v2. Fault points: cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemFree_v2. */
#include "mt_case.h"

static CUdeviceptr pitched(const char* label, size_t width, size_t height, unsigned elem) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  if (CU(label, cuMemAllocPitch(&p, &pitch, width, height, elem)) != 0) return 0;
  printf("PITCH %s %zu\n", label, pitch);
  mt_alloc("dev", p, (uint64_t)width * height, (uint64_t)pitch * height);
  return p;
}

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1 << 20);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 100);
  CUdeviceptr c = mt_mem_alloc("alloc_c", 5 << 20);
  CUdeviceptr p = pitched("pitch_p", 1000, 30, 4);
  CUdeviceptr q = pitched("pitch_q", 333, 7, 8);
  CU("memset_a", a ? cuMemsetD8(a, 1, 1 << 20) : 0);
  mt_mem_free("free_b", b);
  mt_mem_free("free_q", q);
  mt_mem_free("free_c", c);
  CUdeviceptr d = mt_mem_alloc("alloc_d", 777);
  (void)a;
  (void)p;
  (void)d;
  mt_done();
  return 0;
}
