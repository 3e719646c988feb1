/* Loads a plugin (DLCLOSE_LIB), lets it allocate, unloads it, and leaves its allocation live to
 * the end: the exit snapshot must name the plugin's functions, file and line although the
 * plugin is no longer mapped. Prints
 *   PLUGIN <addr> <site-line> <still-mapped 0|1>                                            */
#include <dlfcn.h>
#include <stdlib.h>

#include "mt_case.h"

typedef CUresult (*load_fn)(CUdeviceptr*, size_t, int*);

int main(void) {
  mt_init();
  mt_setup(0);
  const char* path = getenv("DLCLOSE_LIB");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  load_fn load = (load_fn)dlsym(h, "plugin_load_weights");
  CUdeviceptr p = 0;
  int line = 0;
  CU("plugin_load_weights", load(&p, 5 << 20, &line));
  mt_alloc("dev", p, 5 << 20, 5 << 20);
  dlclose(h);
  Dl_info info;
  int mapped = dladdr((void*)load, &info) != 0 && info.dli_fname != NULL;
  printf("PLUGIN 0x%llx %d %d\n", (unsigned long long)p, line, mapped);
  mt_done();
  return 0;
}
