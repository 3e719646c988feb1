/* Family: managed memory — cuMemAllocManaged, freed with cuMemFree_v2. */
#include "mt_case.h"

static CUdeviceptr managed(const char* label, size_t bytes) {
  CUdeviceptr p = 0;
  if (CU(label, cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL)) != 0) return 0;
  mt_alloc("dev", p, bytes, bytes);
  return p;
}

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = managed("managed_a", 2 << 20);
  CUdeviceptr b = managed("managed_b", 4096);
  CUdeviceptr c = managed("managed_c", 65536);
  mt_mem_free("free_a", a);
  mt_mem_free("free_c", c);
  (void)b;
  mt_done();
  return 0;
}
