/* Family: stream-ordered memory and pools — cuMemAllocAsync[_ptsz], cuMemAllocFromPoolAsync[_ptsz],
 * cuMemFreeAsync[_ptsz], cuMemFree_v2 of async memory, cuMemPoolCreate/Destroy. */
#include "mt_case.h"

CUresult ptsz_alloc_async(CUdeviceptr* p, size_t bytes, CUstream s);
CUresult ptsz_alloc_from_pool(CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream s);
CUresult ptsz_free_async(CUdeviceptr p, CUstream s);
CUresult ptsz_sync(CUstream s);

#define TRACKED(label, call, ptr, bytes) \
  (CU(label, call) == 0 ? (mt_alloc("dev", (ptr), (bytes), (bytes)), (ptr)) : ((ptr) = 0))

int main(void) {
  mt_init();
  CUdevice dev = mt_setup(0);
  CUstream s = NULL;
  MUST("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUdeviceptr a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
  TRACKED("alloc_async_a", cuMemAllocAsync(&a, 1 << 20, s), a, 1 << 20);
  TRACKED("alloc_async_ptsz_b", ptsz_alloc_async(&b, 300000, 0), b, 300000);
  TRACKED("alloc_async_e", cuMemAllocAsync(&e, 4096, s), e, 4096); /* leaked */

  CUmemPoolProps props;
  memset(&props, 0, sizeof(props));
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = NULL;
  if (CU("cuMemPoolCreate", cuMemPoolCreate(&pool, &props)) == 0) {
    TRACKED("alloc_pool_c", cuMemAllocFromPoolAsync(&c, 2 << 20, pool, s), c, 2 << 20);
    TRACKED("alloc_pool_ptsz_d", ptsz_alloc_from_pool(&d, 65536, pool, 0), d, 65536);
    TRACKED("alloc_pool_ptsz_f", ptsz_alloc_from_pool(&f, 8192, pool, 0), f, 8192);
  }
  CU("sync_s", cuStreamSynchronize(s));
  CU("sync_ptsz", ptsz_sync(0));

  if (a && CU("free_async_a", cuMemFreeAsync(a, s)) == 0) mt_free("dev", a);
  if (b && CU("free_async_ptsz_b", ptsz_free_async(b, 0)) == 0) mt_free("dev", b);
  if (c && CU("free_sync_c", cuMemFree(c)) == 0) mt_free("dev", c);
  if (d && CU("free_async_ptsz_d", ptsz_free_async(d, 0)) == 0) mt_free("dev", d);
  if (f && CU("free_async_f", cuMemFreeAsync(f, s)) == 0) mt_free("dev", f);
  CU("sync_s", cuStreamSynchronize(s));
  CU("sync_ptsz", ptsz_sync(0));
  if (pool) CU("cuMemPoolDestroy", cuMemPoolDestroy(pool));
  CU("cuStreamDestroy", cuStreamDestroy(s));
  (void)e;
  mt_done();
  return 0;
}
