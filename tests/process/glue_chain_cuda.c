/* Glue: runs under LD_PRELOAD="libmemtrace.so libchaincuda.so": allocates and frees through the
 * driver (both wrapped by libchaincuda, which calls on with dlsym(RTLD_NEXT)), then asks
 * libchaincuda what it saw. */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1 << 20);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 4096);
  mt_mem_free("free_b", b);
  (void)a;
  void (*report)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "chain_cuda_report");
  if (!report) {
    printf("STOP chain_cuda_report not found\n");
    return 3;
  }
  report();
  mt_done();
  return 0;
}
