/* Allocations from 320 distinct functions, so that a snapshot needs several hundred distinct
 * return addresses symbolized: enough for the symbolizer to share the work out among threads.
 * Each function prints where it allocated:
 *   SITE <function> <addr> <line>                                                            */
#include "mt_case.h"

/* noipa: GCC would otherwise specialise them (site_0.isra.0), which the names would show. */
#if defined(__clang__)
#define MT_KEEP __attribute__((noinline))
#else
#define MT_KEEP __attribute__((noipa))
#endif
#define SITE(n)                                                                    \
  MT_KEEP static CUdeviceptr site_##n(void) {                    \
    CUdeviceptr p = 0;                                                             \
    CU("alloc", cuMemAlloc(&p, 4096 + (n)));                                       \
    printf("SITE site_%d 0x%llx %d\n", (n), (unsigned long long)p, __LINE__);      \
    mt_alloc("dev", p, 4096 + (n), 4096 + (n));                                    \
    return p;                                                                      \
  }
#define TEN(a) SITE(a##0) SITE(a##1) SITE(a##2) SITE(a##3) SITE(a##4) \
               SITE(a##5) SITE(a##6) SITE(a##7) SITE(a##8) SITE(a##9)
#define CALL_TEN(a) site_##a##0(); site_##a##1(); site_##a##2(); site_##a##3(); site_##a##4(); \
                    site_##a##5(); site_##a##6(); site_##a##7(); site_##a##8(); site_##a##9();

TEN() TEN(1) TEN(2) TEN(3) TEN(4) TEN(5) TEN(6) TEN(7) TEN(8) TEN(9)
TEN(10) TEN(11) TEN(12) TEN(13) TEN(14) TEN(15) TEN(16) TEN(17) TEN(18) TEN(19)
TEN(20) TEN(21) TEN(22) TEN(23) TEN(24) TEN(25) TEN(26) TEN(27) TEN(28) TEN(29)
TEN(30) TEN(31)

int main(void) {
  mt_init();
  mt_setup(0);
  CALL_TEN() CALL_TEN(1) CALL_TEN(2) CALL_TEN(3) CALL_TEN(4) CALL_TEN(5) CALL_TEN(6) CALL_TEN(7)
  CALL_TEN(8) CALL_TEN(9) CALL_TEN(10) CALL_TEN(11) CALL_TEN(12) CALL_TEN(13) CALL_TEN(14)
  CALL_TEN(15) CALL_TEN(16) CALL_TEN(17) CALL_TEN(18) CALL_TEN(19) CALL_TEN(20) CALL_TEN(21)
  CALL_TEN(22) CALL_TEN(23) CALL_TEN(24) CALL_TEN(25) CALL_TEN(26) CALL_TEN(27) CALL_TEN(28)
  CALL_TEN(29) CALL_TEN(30) CALL_TEN(31)
  mt_done();
  return 0;
}
