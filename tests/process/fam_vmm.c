/* Family: virtual memory management — cuMemCreate, cuMemAddressReserve, cuMemMap,
 * cuMemSetAccess, cuMemRetainAllocationHandle, cuMemUnmap, cuMemRelease, cuMemAddressFree.
 *   A: freed in NCCL's order: retain, release (the retain), unmap, release (creation ref).
 *   B: handle released while still mapped: the mapping (and its memory) lives on -> leaked segment.
 *   C: created, never mapped, never released: physical memory with no segment.
 *   D: mapped twice (two address ranges on one handle), one mapping unmapped, then released.
 * Lines: HANDLE <label> <size> when created, HANDLE_GONE <label> when the last reference went. */
#include "mt_case.h"

static size_t granularity;
static CUmemAllocationProp prop;

static int create(const char* label, CUmemGenericAllocationHandle* h, size_t size) {
  if (CU(label, cuMemCreate(h, size, &prop, 0)) != 0) return 0;
  printf("HANDLE %s %zu\n", label, size);
  return 1;
}

/* Reserve + map + set access. Returns the address or 0. */
static CUdeviceptr map(const char* label, CUmemGenericAllocationHandle h, size_t size) {
  char l[64];
  CUdeviceptr va = 0;
  snprintf(l, sizeof l, "%s_reserve", label);
  if (CU(l, cuMemAddressReserve(&va, size, granularity, 0, 0)) != 0) return 0;
  snprintf(l, sizeof l, "%s_map", label);
  if (CU(l, cuMemMap(va, size, 0, h, 0)) != 0) {
    CU("address_free", cuMemAddressFree(va, size));
    return 0;
  }
  mt_alloc("dev", va, size, size);
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  snprintf(l, sizeof l, "%s_access", label);
  CU(l, cuMemSetAccess(va, size, &access, 1));
  return va;
}

static int unmap(const char* label, CUdeviceptr va, size_t size) {
  if (CU(label, cuMemUnmap(va, size)) != 0) return 0;
  mt_free("dev", va);
  CU("address_free", cuMemAddressFree(va, size));
  return 1;
}

int main(void) {
  mt_init();
  CUdevice dev = mt_setup(0);
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  MUST("granularity", cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  printf("GRANULARITY %zu\n", granularity);

  /* A */
  CUmemGenericAllocationHandle a;
  const size_t size_a = 2 * granularity;
  if (create("create_a", &a, size_a)) {
    CUdeviceptr va = map("a", a, size_a);
    if (va) {
      CU("memset_a", cuMemsetD8(va, 7, size_a));
      CUmemGenericAllocationHandle again = 0;
      int retained = CU("retain_a", cuMemRetainAllocationHandle(&again, (void*)(uintptr_t)va)) == 0;
      if (retained) printf("SAME_HANDLE %d\n", again == a);
      if (retained) CU("release_retain_a", cuMemRelease(again));
      unmap("unmap_a", va, size_a);
    }
    if (CU("release_a", cuMemRelease(a)) == 0) printf("HANDLE_GONE create_a\n");
  }

  /* B */
  CUmemGenericAllocationHandle b;
  const size_t size_b = granularity;
  if (create("create_b", &b, size_b)) {
    CUdeviceptr vb = map("b", b, size_b);
    CU("release_b", cuMemRelease(b)); /* still mapped: memory stays */
    if (!vb) printf("HANDLE_GONE create_b\n");
  }

  /* C */
  CUmemGenericAllocationHandle c;
  create("create_c", &c, 3 * granularity);

  /* D */
  CUmemGenericAllocationHandle d;
  const size_t size_d = granularity;
  if (create("create_d", &d, size_d)) {
    CUdeviceptr v1 = map("d1", d, size_d);
    CUdeviceptr v2 = map("d2", d, size_d);
    int left = (v1 != 0) + (v2 != 0);
    if (v1 && unmap("unmap_d1", v1, size_d)) --left;
    CU("release_d", cuMemRelease(d));
    if (!left) printf("HANDLE_GONE create_d\n");
    /* v2 stays mapped: leaked */
  }
  mt_done();
  return 0;
}
