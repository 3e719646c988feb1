/* A program that opens a library with RTLD_DEEPBIND (DEEP_BIND_LIB; RTLD_NOW, or RTLD_LAZY when
 * DEEP_BIND_LAZY is set) and lets it allocate through the driver it links. Under memtrace:
 *   - its first calls, made before anything gives memtrace a chance to look, are not seen
 *     (allocations printed as MISSED, not ALLOC: the snapshot cannot have them);
 *   - then the program resolves a driver entry point with cuGetProcAddress, as the CUDA runtime
 *     does, and memtrace finds the library bound past it;
 *   - the library's later allocations and frees are seen (ALLOC / FREE lines).
 * In the lazy variant the library's slots are resolved only by its first calls: a lookup comes
 * first (memtrace finds the slots unresolved), then the first calls, then a second lookup. */
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdlib.h>

#include "mt_case.h"

typedef int (*alloc_fn)(size_t, CUdeviceptr*);
typedef int (*free_fn)(CUdeviceptr);

/* What the runtime does at start-up: resolve an entry point through the driver's resolver. */
static void resolve(const char* label) {
  void* fn = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CU(label, cuGetProcAddress("cuMemAlloc", &fn, 3020, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  printf("STATUS %s %d\n", label, (int)status);
}

int main(void) {
  mt_init();
  mt_setup(0);
  CUdeviceptr own = mt_mem_alloc("own_alloc", 1 << 20);
  const char* path = getenv("DEEP_BIND_LIB");
  int lazy = getenv("DEEP_BIND_LAZY") != NULL;
  void* h = path ? dlopen(path, (lazy ? RTLD_LAZY : RTLD_NOW) | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
  if (!h) {
    printf("STOP dlopen %s\n", dlerror());
    return 3;
  }
  alloc_fn deep_alloc = (alloc_fn)dlsym(h, "deep_alloc");
  free_fn deep_free = (free_fn)dlsym(h, "deep_free");
  if (!deep_alloc || !deep_free) {
    printf("STOP dlsym\n");
    return 3;
  }
  if (lazy) resolve("resolve_before_first_call");

  CUdeviceptr missed = 0, missed_free = 0;
  if (CU("deep_alloc_missed", deep_alloc(3 << 20, &missed)) == 0)
    printf("MISSED 0x%llx %d\n", (unsigned long long)missed, 3 << 20);
  /* A free memtrace does not see either (in the lazy variant, the call that resolves cuMemFree_v2). */
  if (CU("deep_alloc_missed_free", deep_alloc(1 << 20, &missed_free)) == 0)
    printf("MISSED 0x%llx %d\n", (unsigned long long)missed_free, 1 << 20);
  CU("deep_free_missed", deep_free(missed_free));

  resolve("resolve");

  CUdeviceptr seen = 0, gone = 0;
  if (CU("deep_alloc_seen", deep_alloc(5 << 20, &seen)) == 0) mt_alloc("dev", seen, 5 << 20, 5 << 20);
  if (CU("deep_alloc_gone", deep_alloc(2 << 20, &gone)) == 0) mt_alloc("dev", gone, 2 << 20, 2 << 20);
  if (CU("deep_free_gone", deep_free(gone)) == 0) mt_free("dev", gone);
  (void)own;
  mt_done();
  return 0;
}
