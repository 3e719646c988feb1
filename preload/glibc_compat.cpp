// Keeps libmemtrace.so loadable on glibc 2.34/2.35 images (Ubuntu 22.04, common on GPU
// machines): the static libstdc++ built here references arc4random, new in glibc 2.36.
// This local definition satisfies that reference at link time, so no GLIBC_2.36 symbol is
// required at run time. It is never exported (version script: local).
#include <sys/random.h>

#include <cstdint>

extern "C" uint32_t arc4random(void) {
  uint32_t v = 0;
  while (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}
