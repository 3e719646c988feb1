/* Feature probes: a program asks the dynamic linker whether the driver is there
 * (dlsym(RTLD_DEFAULT, name) != NULL) and changes course by the answer. memtrace exports its
 * wrappers under the driver's names, so with memtrace preloaded the answer must still be the
 * driver's: absent before any driver is loaded, present once one is (globally). */
#include <dlfcn.h>
#include <stdio.h>

static void probe(const char* when) {
  printf("PROBE %s cuMemAlloc_v2 %s\n", when, dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "present" : "absent");
  printf("PROBE %s cuIpcGetMemHandle %s\n", when, dlsym(RTLD_DEFAULT, "cuIpcGetMemHandle") ? "present" : "absent");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  probe("before");
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  probe("after");
  printf("DONE\n");
  return 0;
}
