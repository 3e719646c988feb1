/* Run setuid-root by an unprivileged user (so in secure-execution mode, AT_SECURE), with memtrace
 * preloaded through /etc/ld.so.preload: allocates device memory through the driver named by
 * argv[1] (an absolute path: a secure process ignores LD_LIBRARY_PATH). Prints
 *   SECURE <AT_SECURE> <uid> <euid>
 *   RC <cuInit> <cuDeviceGet> <cuCtxCreate> <cuMemAlloc>
 */
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <unistd.h>

int main(int argc, char** argv) {
  printf("SECURE %lu %d %d\n", getauxval(AT_SECURE), (int)getuid(), (int)geteuid());
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*device)(int*, int) = (int (*)(int*, int))dlsym(h, "cuDeviceGet");
  int (*context)(void**, unsigned, int) = (int (*)(void**, unsigned, int))dlsym(h, "cuCtxCreate_v2");
  int (*alloc)(unsigned long long*, size_t) = (int (*)(unsigned long long*, size_t))dlsym(h, "cuMemAlloc_v2");
  if (!init || !device || !context || !alloc) return 4;
  int dev = 0;
  void* ctx = NULL;
  unsigned long long p = 0;
  int a = init(0);
  int b = device(&dev, 0);
  int c = context(&ctx, 0, dev);
  int d = alloc(&p, 1 << 20);
  printf("RC %d %d %d %d\n", a, b, c, d);
  return 0;
}
