/* Glue: runs under LD_PRELOAD="libmemtrace.so libchain.so"; calls puts (wrapped by libchain)
 * and asks libchain what its RTLD_NEXT lookups found. */
#include "mt_case.h"

int main(void) {
  mt_init();
  puts("hello through the chain");
  void (*report)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "chain_report");
  if (!report) {
    printf("STOP chain_report not found\n");
    return 3;
  }
  report();
  mt_done();
  return 0;
}
