// Stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync) and
// their per-thread-default-stream twins, which forward to the matching real twin.
// An allocation on a capturing stream is a graph node, not memory: it is not recorded.
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

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

void after_async_alloc(Session* s, CUresult r, CUdeviceptr* dptr, size_t bytesize, CUstream stream, bool ptsz,
                       void* caller) {
  if (!s) return;
  uint64_t st = reinterpret_cast<uint64_t>(stream);
  if (r == CUDA_SUCCESS && dptr) {
    if (capturing(stream, ptsz)) return;
    record_alloc(*s, {.addr = *dptr, .size = bytesize, .requested = bytesize, .stream = st, .kind = MemKind::Async},
                 caller);
  } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    record_oom(*s, bytesize, st, caller);
  }
}

}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  auto real = real_fn<Hook::cuMemAllocAsync, decltype(&::cuMemAllocAsync)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize, hStream);
  after_async_alloc(scope.session(), r, dptr, bytesize, hStream, false, __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                               CUstream hStream) {
  auto real = real_fn<Hook::cuMemAllocAsync_ptsz, decltype(&::cuMemAllocAsync_ptsz)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize, hStream);
  after_async_alloc(scope.session(), r, dptr, bytesize, hStream, true, __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                                  CUmemoryPool pool, CUstream hStream) {
  auto real = real_fn<Hook::cuMemAllocFromPoolAsync, decltype(&::cuMemAllocFromPoolAsync)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize, pool, hStream);
  after_async_alloc(scope.session(), r, dptr, bytesize, hStream, false, __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                                       CUmemoryPool pool, CUstream hStream) {
  auto real = real_fn<Hook::cuMemAllocFromPoolAsync_ptsz, decltype(&::cuMemAllocFromPoolAsync_ptsz)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize, pool, hStream);
  after_async_alloc(scope.session(), r, dptr, bytesize, hStream, true, __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  auto real = real_fn<Hook::cuMemFreeAsync, decltype(&::cuMemFreeAsync)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), dptr, reinterpret_cast<uint64_t>(hStream), __builtin_return_address(0));
  CUresult r = real(dptr, hStream);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  auto real = real_fn<Hook::cuMemFreeAsync_ptsz, decltype(&::cuMemFreeAsync_ptsz)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), dptr, reinterpret_cast<uint64_t>(hStream), __builtin_return_address(0));
  CUresult r = real(dptr, hStream);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}
