/* The per-thread-default-stream half of fam_async: with CUDA_API_PER_THREAD_DEFAULT_STREAM the
 * header maps cuMemAllocAsync & co. to their _ptsz entry points. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "mt_case.h"

CUresult ptsz_alloc_async(CUdeviceptr* p, size_t bytes, CUstream s) { return cuMemAllocAsync(p, bytes, s); }
CUresult ptsz_alloc_from_pool(CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream s) {
  return cuMemAllocFromPoolAsync(p, bytes, pool, s);
}
CUresult ptsz_free_async(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }
CUresult ptsz_sync(CUstream s) { return cuStreamSynchronize(s); }
