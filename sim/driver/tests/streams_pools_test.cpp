// Lazy stream execution, implicit legacy-stream ordering, events, stream-ordered allocation
// and pools.
#include <cudaTypedefs.h>

#include <cstring>

#include "helpers.h"

using namespace simtest;

namespace {

unsigned char byte_at(CUdeviceptr p) { return *reinterpret_cast<volatile unsigned char*>(p); }

cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr) {
  cuuint64_t v = 0;
  REQUIRE(cuMemPoolGetAttribute(pool, attr, &v) == CUDA_SUCCESS);
  return v;
}

}  // namespace

TEST_CASE("async work runs only at synchronisation points", "[streams]") {
  use_primary(0);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  CU_OK(cuMemAlloc(&p, 4096));
  CU_OK(cuMemsetD8(p, 0, 4096));
  CU_OK(cuMemsetD8Async(p, 0xab, 4096, s));
  CHECK(byte_at(p) == 0);  // queued, not run
  unsigned char host[16];
  CU_OK(cuMemcpyDtoH(host, p, 16));  // the legacy stream does not wait for a non-blocking stream
  CHECK(host[0] == 0);
  CU_OK(cuStreamQuery(s));  // a query runs the queue
  CHECK(byte_at(p) == 0xab);

  // Blocking streams are implicitly ordered before later legacy-stream work.
  CUstream blocking;
  CU_OK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CU_OK(cuMemsetD8Async(p, 0xcd, 4096, blocking));
  CHECK(byte_at(p) == 0xab);
  CU_OK(cuMemcpyDtoH(host, p, 16));
  CHECK(host[0] == 0xcd);

  // Synchronising the NULL stream waits for the blocking streams too.
  CU_OK(cuMemsetD8Async(p, 0xce, 1, blocking));
  CU_OK(cuStreamSynchronize(nullptr));
  CHECK(byte_at(p) == 0xce);

  // Legacy-stream work waits for earlier blocking-stream work; a later blocking-stream op
  // waits for the legacy stream.
  CU_OK(cuMemsetD8Async(p, 1, 1, blocking));
  CU_OK(cuMemsetD8Async(p, 2, 1, CU_STREAM_LEGACY));
  CU_OK(cuMemsetD8Async(p, 3, 1, blocking));
  CU_OK(cuStreamSynchronize(blocking));
  CHECK(byte_at(p) == 3);

  // Per-thread default stream: the _ptsz twins treat NULL as this thread's stream.
  auto memset_ptsz = resolve<PFN_cuMemsetD8Async_v7000_ptsz>("cuMemsetD8Async", 7000,
                                                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  CU_OK(memset_ptsz(p, 0x42, 1, nullptr));
  CHECK(byte_at(p) == 3);
  CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  CHECK(byte_at(p) == 0x42);

  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_OK(cuStreamIsCapturing(s, &cap));
  CHECK(cap == CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(cuStreamIsCapturing(nullptr, &cap));
  CU_OK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &cap));

  CU_OK(cuStreamDestroy(s));
  CU_OK(cuStreamDestroy(blocking));
  CHECK(cuStreamSynchronize(s) == CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cuMemFree(p));
}

TEST_CASE("events order streams and time work", "[streams][events]") {
  use_primary(0);
  CUstream s1, s2;
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent start, done, untimed;
  CU_OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU_OK(cuEventCreate(&done, CU_EVENT_DEFAULT));
  CU_OK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&untimed, CU_EVENT_INTERPROCESS) == CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr src, dst;
  CU_OK(cuMemAlloc(&src, 256));
  CU_OK(cuMemAlloc(&dst, 256));
  CU_OK(cuMemsetD8(src, 0, 256));
  CU_OK(cuMemsetD8(dst, 0, 256));
  CU_OK(cuEventRecord(start, s1));
  CU_OK(cuMemsetD8Async(src, 0x77, 256, s1));
  CU_OK(cuEventRecord(done, s1));
  CU_OK(cuStreamWaitEvent(s2, done, 0));
  CU_OK(cuMemcpyDtoDAsync(dst, src, 256, s2));

  float ms = -1;
  CHECK(cuEventElapsedTime(&ms, start, done) == CUDA_ERROR_NOT_READY);
  CU_OK(cuStreamSynchronize(s2));  // runs s1 up to `done` first, through the wait
  CHECK(byte_at(dst) == 0x77);
  CU_OK(cuEventQuery(done));
  CU_OK(cuEventElapsedTime(&ms, start, done));
  CHECK(ms >= 0.0f);
  CU_OK(cuEventRecord(untimed, s1));
  CU_OK(cuEventSynchronize(untimed));
  CHECK(cuEventElapsedTime(&ms, start, untimed) == CUDA_ERROR_INVALID_HANDLE);

  // Host callbacks see the stream's state in order.
  static unsigned char seen;
  CU_OK(cuMemsetD8Async(src, 0x10, 1, s1));
  CU_OK(cuLaunchHostFunc(s1, [](void* p) { seen = *static_cast<unsigned char*>(p); },
                         reinterpret_cast<void*>(src)));
  CU_OK(cuMemsetD8Async(src, 0x20, 1, s1));
  CU_OK(cuStreamSynchronize(s1));
  CHECK(seen == 0x10);
  CHECK(byte_at(src) == 0x20);

  for (CUevent e : {start, done, untimed}) CU_OK(cuEventDestroy(e));
  CHECK(cuEventDestroy(start) == CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cuStreamDestroy(s1));
  CU_OK(cuStreamDestroy(s2));
  CU_OK(cuMemFree(src));
  CU_OK(cuMemFree(dst));
}

TEST_CASE("stream-ordered free is deferred until the stream reaches it", "[pools][async]") {
  use_primary(0);
  CU_OK(cuCtxSynchronize());
  const size_t free_before = free_bytes();
  CUmemoryPool pool;
  CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
  CUmemoryPool current;
  CU_OK(cuDeviceGetMemPool(&current, 0));
  CHECK(current == pool);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUdeviceptr p;
  CU_OK(cuMemAllocAsync(&p, 1 * kMiB, s));
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1 * kMiB);
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * kMiB);
  CHECK(free_bytes() == free_before - 2 * kMiB);  // the pool's reserve is what the device holds
  CUmemoryPool owner = nullptr;
  CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  CHECK(owner == pool);

  // A memset queued before the free runs before it, at synchronisation.
  static unsigned char seen_by_callback;
  CU_OK(cuMemsetD8Async(p, 0xab, 1 * kMiB, s));
  CU_OK(cuLaunchHostFunc(s, [](void* q) { seen_by_callback = *static_cast<unsigned char*>(q); },
                         reinterpret_cast<void*>(p)));
  CU_OK(cuMemFreeAsync(p, s));
  CHECK(cuMemFreeAsync(p, s) == CUDA_ERROR_INVALID_VALUE);  // already being freed
  CHECK(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr base;
  size_t size;
  CU_OK(cuMemGetAddressRange(&base, &size, p));  // still allocated: the stream has not got there
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1 * kMiB);
  CHECK(seen_by_callback == 0);

  CU_OK(cuStreamSynchronize(s));
  CHECK(seen_by_callback == 0xab);
  CHECK(cuMemGetAddressRange(&base, &size, p) == CUDA_ERROR_NOT_FOUND);
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= 1 * kMiB);
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);  // threshold 0: released at sync
  CHECK(free_bytes() == free_before);

  // Work still queued on freed memory faults at the next synchronisation.
  CUstream other;
  CU_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CU_OK(cuMemAllocAsync(&p, 4096, s));
  CU_OK(cuMemsetD8Async(p, 1, 4096, other));
  CU_OK(cuMemFreeAsync(p, s));
  CU_OK(cuStreamSynchronize(s));
  CHECK(cuStreamSynchronize(other) == CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_OK(cuStreamSynchronize(other));  // reported once

  // A release threshold keeps reserve across synchronisation; TrimTo gives it back.
  cuuint64_t threshold = 64 * kMiB;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CU_OK(cuMemAllocAsync(&p, 3 * kMiB, s));
  CU_OK(cuMemFreeAsync(p, s));
  CU_OK(cuStreamSynchronize(s));
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);
  CU_OK(cuMemAllocAsync(&p, 3 * kMiB, s));  // reuses the reserve
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);
  CU_OK(cuMemFree(p));  // cuMemFree of a pool allocation works too
  CU_OK(cuMemPoolTrimTo(pool, 0));
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  threshold = 0;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  cuuint64_t zero = 0, one = 1;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0);
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero) == CUDA_ERROR_INVALID_VALUE);
  CHECK(free_bytes() == free_before);
  CU_OK(cuStreamDestroy(s));
  CU_OK(cuStreamDestroy(other));
}

TEST_CASE("explicit pools, current pool and the 13.0 location API", "[pools]") {
  use_primary(0);
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool;
  CU_OK(cuMemPoolCreate(&pool, &props));
  auto from_pool_ptsz = resolve<PFN_cuMemAllocFromPoolAsync_v11020_ptsz>(
      "cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  CUdeviceptr p, q;
  CU_OK(cuMemAllocFromPoolAsync(&p, 5000, pool, nullptr));
  CU_OK(from_pool_ptsz(&q, 5000, pool, nullptr));
  CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 2 * footprint(5000));

  CU_OK(cuDeviceSetMemPool(0, pool));
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool got;
  CU_OK(cuMemGetMemPool(&got, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
  CHECK(got == pool);
  CUmemoryPool dflt;
  CU_OK(cuMemGetDefaultMemPool(&dflt, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
  CHECK(dflt != pool);
  CHECK(cuMemPoolDestroy(dflt) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, dflt));
  CU_OK(cuDeviceGetMemPool(&got, 0));
  CHECK(got == dflt);

  // Host pools hand out host memory.
  CUmemLocation host_loc = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemoryPool host_pool;
  CU_OK(cuMemGetDefaultMemPool(&host_pool, &host_loc, CU_MEM_ALLOCATION_TYPE_PINNED));
  CUdeviceptr hp;
  const size_t free_before = free_bytes();
  CU_OK(cuMemAllocFromPoolAsync(&hp, 4096, host_pool, nullptr));
  unsigned type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hp));
  CHECK(type == CU_MEMORYTYPE_HOST);
  CHECK(free_bytes() == free_before);
  CU_OK(cuMemFreeAsync(hp, nullptr));

  // Destroying a pool with live allocations defers the release to their frees.
  CU_OK(cuMemPoolDestroy(pool));
  CHECK(cuMemPoolTrimTo(pool, 0) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFreeAsync(p, CU_STREAM_PER_THREAD));
  CU_OK(cuMemFreeAsync(q, CU_STREAM_PER_THREAD));
  const size_t free_mid = free_bytes();
  CU_OK(cuCtxSynchronize());
  CHECK(free_bytes() == free_mid + 2 * kMiB);  // the destroyed pool's segment went with them
  CUmemAccess_flags access;
  CU_OK(cuMemPoolGetAccess(&access, dflt, &loc));
  CHECK(access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

TEST_CASE("cuMemFree waits for every stream's queued work, non-blocking streams included", "[streams]") {
  use_primary(0);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  CU_OK(cuMemAlloc(&p, 4096));
  CU_OK(cuMemsetD8(p, 0x5a, 4096));
  unsigned char host[16] = {};
  CU_OK(cuMemcpyDtoHAsync(host, p, 16, s));  // reads p: must run before p is gone
  CHECK(host[0] == 0);                         // queued, not run
  CU_OK(cuMemFree(p));
  CHECK(host[0] == 0x5a);
  CHECK(host[15] == 0x5a);
  CU_OK(cuStreamDestroy(s));
}
