/* Requests no device can satisfy: 1 << 62 bytes and SIZE_MAX bytes. Both fail; the snapshot's
 * record of them must hold sizes the viewer can read exactly, and keep the true values. */
#include <stdint.h>

#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr p = 0;
  printf("RC huge62 %d\n", (int)cuMemAlloc(&p, (size_t)1 << 62));
  printf("RC hugemax %d\n", (int)cuMemAlloc(&p, SIZE_MAX));
  (void)mt_mem_alloc("small", 4096);
  mt_done();
  return 0;
}
