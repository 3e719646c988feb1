/* Two known call paths to the same allocation site: the snapshot's frames must name each
 * function with its file and line. The program prints where each call is:
 *   PATH <name> <addr> <site-line> <caller> <call-line>                                      */
#include "mt_case.h"

__attribute__((noinline)) static CUdeviceptr alloc_here(size_t n, int* site_line) {
  CUdeviceptr p = 0;
  *site_line = __LINE__; CU("alloc", cuMemAlloc(&p, n));
  return p;
}

__attribute__((noinline)) static CUdeviceptr path_one(void) {
  int site = 0;
  CUdeviceptr p = alloc_here(1 << 20, &site); int call = __LINE__;
  printf("PATH one 0x%llx %d path_one %d\n", (unsigned long long)p, site, call);
  return p;
}

__attribute__((noinline)) static CUdeviceptr path_two(void) {
  int site = 0;
  CUdeviceptr p = alloc_here(3 << 20, &site); int call = __LINE__;
  printf("PATH two 0x%llx %d path_two %d\n", (unsigned long long)p, site, call);
  return p;
}

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr a = path_one();
  CUdeviceptr b = path_two();
  mt_alloc("dev", a, 1 << 20, 1 << 20);
  mt_alloc("dev", b, 3 << 20, 3 << 20);
  mt_done();
  return 0;
}
