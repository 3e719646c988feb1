/* MEMTRACE_ALLOCATOR=caching, one scenario per argument (run_case.py runs each with and without
 * the caching allocator and compares):
 *   mix        allocations of many sizes (small and large pool, pitched), frees, reuse; some left live
 *   safety     an async memset queued on a (non-blocking) stream before cuMemFree(A) must not land
 *              in the data of the next block handed out at A's address
 *   oom        cached free segments are given back before out-of-memory is reported; the error code
 *              the program gets is the driver's
 *   grow       two 15 MiB blocks: with expandable segments, two pages mapped back to back
 *   range      cuMemGetAddressRange_v2 / cuPointerGetAttribute(s) answer for the block
 *   ipc        cuIpcGetMemHandle of a cached block (looked up with dlsym: the simulated driver has
 *              no IPC, the wrapper answers first)
 *   pluggable  memtrace_malloc / memtrace_free through dlsym, as PyTorch's CUDAPluggableAllocator
 * Extra protocol lines: RANGE <label> 0x<base> <size>, SAME <label> <0|1>, INTACT <label> <0|1>.
 */
#include "mt_case.h"

static void range_line(const char* label, CUdeviceptr base, size_t size) {
  printf("RANGE %s 0x%llx %zu\n", label, (unsigned long long)base, size);
}

static int mix(void) {
  CUdeviceptr small[6] = {0};
  size_t sizes[6] = {100, 512, 1000, 4096, 200000, 1 << 20};
  for (int i = 0; i < 6; ++i) small[i] = mt_mem_alloc("alloc_small", sizes[i]);
  CUdeviceptr big = mt_mem_alloc("alloc_big", 5 << 20);
  CUdeviceptr huge = mt_mem_alloc("alloc_huge", 12 << 20);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  if (CU("pitch", cuMemAllocPitch(&p, &pitch, 1000, 30, 4)) == 0) {
    printf("PITCH pitch %zu\n", pitch);
    mt_alloc("dev", p, (uint64_t)pitch * 30, (uint64_t)pitch * 30);
  }
  CU("memset_big", big ? cuMemsetD8(big, 7, 5 << 20) : 0);
  mt_mem_free("free_small1", small[1]);
  mt_mem_free("free_small3", small[3]);
  mt_mem_free("free_huge", huge);
  /* Reuse: same sizes again. */
  CUdeviceptr again1 = mt_mem_alloc("alloc_again1", 512);
  CUdeviceptr again2 = mt_mem_alloc("alloc_again2", 12 << 20);
  mt_mem_free("free_small0", small[0]);
  mt_mem_free("free_again2", again2);
  mt_mem_free("free_pitch", p);
  CU("free_null", cuMemFree(0));
  /* A pointer inside a block is not a block start: refused, and nothing is freed. */
  CU("free_inside", small[2] ? cuMemFree(small[2] + 16) : 0);
  (void)again1;
  return 0;
}

static int safety(void) {
  CUstream s = NULL;
  MUST("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const size_t n = 1 << 20;
  unsigned char* host = (unsigned char*)malloc(n);
  /* A and C fill one 2 MiB small-pool segment, so the next 1 MiB block can only be A's. */
  CUdeviceptr a = mt_mem_alloc("alloc_a", n);
  CUdeviceptr c = mt_mem_alloc("alloc_c", n);
  if (!a || !c) return 1;
  /* Queued on s; the simulated device runs it at the next synchronization of s. */
  CU("memset_async", cuMemsetD8Async(a, 0xAB, n, s));
  mt_mem_free("free_a", a);
  CUdeviceptr b = mt_mem_alloc("alloc_b", n);
  if (!b) return 1;
  printf("SAME reuse %d\n", a == b);
  memset(host, 0x11, n);
  CU("fill_b", cuMemcpyHtoD(b, host, n));
  CU("sync_s", cuStreamSynchronize(s));
  memset(host, 0, n);
  CU("read_b", cuMemcpyDtoH(host, b, n));
  int intact = 1;
  for (size_t i = 0; i < n; ++i)
    if (host[i] != 0x11) intact = 0;
  printf("INTACT b %d\n", intact);
  mt_mem_free("free_b", b);
  mt_mem_free("free_c", c);
  free(host);
  return 0;
}

static int oom(void) {
  /* Run with SIMCUDA_MEMORY=64M: three 16 MiB blocks, freed (cached), then 40 MiB: the allocator
   * must give its cached segments back and retry. Then 100 MiB: out of memory either way. */
  CUdeviceptr p[3];
  for (int i = 0; i < 3; ++i) p[i] = mt_mem_alloc("alloc_16m", 16 << 20);
  for (int i = 0; i < 3; ++i) mt_mem_free("free_16m", p[i]);
  CUdeviceptr q = mt_mem_alloc("alloc_40m", 40 << 20);
  CUdeviceptr r = 0;
  int rc = CU("alloc_100m", cuMemAlloc(&r, (size_t)100 << 20));
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) printf("OOM %llu\n", (unsigned long long)(100ull << 20));
  if (rc == 0) mt_alloc("dev", r, 100 << 20, 100 << 20);
  mt_mem_free("free_40m", q);
  return 0;
}

static int range(void) {
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1000);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 3000);
  if (!a || !b) return 1;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CU("range_a", cuMemGetAddressRange(&base, &size, a + 10)) == 0) range_line("range_a", base, size);
  if (CU("range_b", cuMemGetAddressRange(&base, &size, b + 2999)) == 0) range_line("range_b", base, size);
  CUdeviceptr start = 0;
  size_t len = 0;
  if (CU("attr_start", cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 5)) == 0 &&
      CU("attr_size", cuPointerGetAttribute(&len, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b + 5)) == 0)
    range_line("attr_b", start, len);
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  int ordinal = -5;
  start = 0;
  len = 0;
  void* data[3] = {&start, &ordinal, &len};
  if (CU("attrs_a", cuPointerGetAttributes(3, attrs, data, a + 999)) == 0) {
    range_line("attrs_a", start, len);
    printf("ORDINAL attrs_a %d\n", ordinal);
  }
  mt_mem_free("free_a", a);
  /* Freed memory is not an allocation any more. */
  CU("range_freed", cuMemGetAddressRange(&base, &size, a));
  mt_mem_free("free_b", b);
  return 0;
}

static int grow(void) {
  /* With expandable_segments:True the second 15 MiB block needs a second 20 MiB page mapped right
   * after the first: one contiguous mapped range (one snapshot segment) of 40 MiB. */
  CUdeviceptr a = mt_mem_alloc("alloc_15m_a", 15 << 20);
  CUdeviceptr b = mt_mem_alloc("alloc_15m_b", 15 << 20);
  mt_mem_free("free_a", a);
  CUdeviceptr c = mt_mem_alloc("alloc_1m", 1 << 20);
  (void)b;
  (void)c;
  return 0;
}

typedef CUresult (*ipc_get_fn)(CUipcMemHandle*, CUdeviceptr);

static int ipc(void) {
  ipc_get_fn get = (ipc_get_fn)dlsym(RTLD_DEFAULT, "cuIpcGetMemHandle");
  mt_sym("cuIpcGetMemHandle", (void*)get);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 4096);
  if (!get || !a) return 1;
  CUipcMemHandle h;
  CU("ipc_a", get(&h, a));
  CU("ipc_a_again", get(&h, a));
  mt_mem_free("free_a", a);
  return 0;
}

typedef void* (*malloc_fn)(ssize_t, int, CUstream);
typedef void (*free_fn)(void*, ssize_t, int, CUstream);

static int pluggable(void) {
  malloc_fn m = (malloc_fn)dlsym(RTLD_DEFAULT, "memtrace_malloc");
  free_fn f = (free_fn)dlsym(RTLD_DEFAULT, "memtrace_free");
  mt_sym("memtrace_malloc", (void*)m);
  mt_sym("memtrace_free", (void*)f);
  if (!m || !f) return 1;
  CUstream s = NULL;
  MUST("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* p = m(1000, 0, s);
  void* q = m(3 << 20, 0, s);
  printf("PLUGGABLE p %p\nPLUGGABLE q %p\n", p, q);
  if (!p || !q) return 1;
  mt_alloc("dev", (uint64_t)(uintptr_t)p, 1000, 1000);
  mt_alloc("dev", (uint64_t)(uintptr_t)q, 3 << 20, 3 << 20);
  unsigned char buf[1000];
  memset(buf, 0x5c, sizeof buf);
  CU("fill_p", cuMemcpyHtoD((CUdeviceptr)(uintptr_t)p, buf, sizeof buf));
  memset(buf, 0, sizeof buf);
  CU("read_p", cuMemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)p, sizeof buf));
  printf("INTACT p %d\n", buf[0] == 0x5c && buf[999] == 0x5c);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CU("range_p", cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p + 1)) == 0)
    range_line("range_p", base, size);
  f(p, 1000, 0, s);
  mt_free("dev", (uint64_t)(uintptr_t)p);
  (void)q; /* left live */
  return 0;
}

int main(int argc, char** argv) {
  mt_init();
  if (argc < 2) return 2;
  mt_setup(0);
  int rc = 2;
  if (!strcmp(argv[1], "mix")) rc = mix();
  else if (!strcmp(argv[1], "safety")) rc = safety();
  else if (!strcmp(argv[1], "oom")) rc = oom();
  else if (!strcmp(argv[1], "range")) rc = range();
  else if (!strcmp(argv[1], "ipc")) rc = ipc();
  else if (!strcmp(argv[1], "grow")) rc = grow();
  else if (!strcmp(argv[1], "pluggable")) rc = pluggable();
  if (rc == 0) mt_done();
  return rc;
}
