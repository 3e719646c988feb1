// Stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync) and
// their per-thread-default-stream twins, which forward to the matching real twin.
// An allocation on a capturing stream is a graph node, not memory: it is not recorded.
#include "preload/forward.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

bool capturing(CUstream stream, bool ptsz) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  auto fn = ptsz ? real_fn<Hook::cuStreamIsCapturing_ptsz, decltype(&::cuStreamIsCapturing_ptsz)>()
                 : real_fn<Hook::cuStreamIsCapturing, decltype(&::cuStreamIsCapturing)>();
  if (!fn || fn(stream, &st) != CUDA_SUCCESS) return false;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

auto async_record(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool ptsz) {
  return [=](NewAlloc* a) {
    if (!dptr || capturing(stream, ptsz)) return false;
    *a = {.addr = *dptr, .size = bytes, .requested = bytes, .stream = reinterpret_cast<uint64_t>(stream),
          .kind = MemKind::Async};
    return true;
  };
}

uint64_t raw(CUstream s) { return reinterpret_cast<uint64_t>(s); }

}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return forward_alloc<Hook::cuMemAllocAsync, decltype(&::cuMemAllocAsync)>(
      __builtin_return_address(0), OnOom::Record, bytesize, raw(hStream),
      async_record(dptr, bytesize, hStream, false), dptr, bytesize, hStream);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                               CUstream hStream) {
  return forward_alloc<Hook::cuMemAllocAsync_ptsz, decltype(&::cuMemAllocAsync_ptsz)>(
      __builtin_return_address(0), OnOom::Record, bytesize, raw(hStream),
      async_record(dptr, bytesize, hStream, true), dptr, bytesize, hStream);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                                  CUmemoryPool pool, CUstream hStream) {
  return forward_alloc<Hook::cuMemAllocFromPoolAsync, decltype(&::cuMemAllocFromPoolAsync)>(
      __builtin_return_address(0), OnOom::Record, bytesize, raw(hStream),
      async_record(dptr, bytesize, hStream, false), dptr, bytesize, pool, hStream);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                                       CUmemoryPool pool, CUstream hStream) {
  return forward_alloc<Hook::cuMemAllocFromPoolAsync_ptsz, decltype(&::cuMemAllocFromPoolAsync_ptsz)>(
      __builtin_return_address(0), OnOom::Record, bytesize, raw(hStream),
      async_record(dptr, bytesize, hStream, true), dptr, bytesize, pool, hStream);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return forward_free<Hook::cuMemFreeAsync, decltype(&::cuMemFreeAsync)>(__builtin_return_address(0), dptr,
                                                                        raw(hStream), dptr, hStream);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return forward_free<Hook::cuMemFreeAsync_ptsz, decltype(&::cuMemFreeAsync_ptsz)>(
      __builtin_return_address(0), dptr, raw(hStream), dptr, hStream);
}
