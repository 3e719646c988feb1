/* Feature probes: a program asks the dynamic linker whether the driver has an entry point
 * (dlsym(RTLD_DEFAULT, name) != NULL) and changes course by the answer. With memtrace preloaded
 * the answer must be the driver's: memtrace exports its wrappers under the driver's names, so a
 * name the driver lacks (the simulated driver has no cuIpcGetMemHandle) must still be missing. */
#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  printf("PROBE cuIpcGetMemHandle %s\n", dlsym(RTLD_DEFAULT, "cuIpcGetMemHandle") ? "present" : "absent");
  printf("PROBE cuMemAlloc_v2 %s\n", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "present" : "absent");
  mt_done();
  return 0;
}
