// Linear device memory and managed memory: cuMemAlloc_v2, cuMemAllocPitch_v2,
// cuMemAllocManaged, and cuMemFree_v2 (which also frees async allocations).
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto real = real_fn<Hook::cuMemAlloc_v2, decltype(&::cuMemAlloc_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize);
  if (Session* s = scope.session()) {
    if (r == CUDA_SUCCESS && dptr)
      record_alloc(*s, {.addr = *dptr, .size = bytesize, .requested = bytesize, .kind = MemKind::Device},
                   __builtin_return_address(0));
    else if (r == CUDA_ERROR_OUT_OF_MEMORY)
      record_oom(*s, bytesize, 0, __builtin_return_address(0));
  }
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                             size_t WidthInBytes, size_t Height,
                                                             unsigned int ElementSizeBytes) {
  auto real = real_fn<Hook::cuMemAllocPitch_v2, decltype(&::cuMemAllocPitch_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (Session* s = scope.session()) {
    uint64_t requested = static_cast<uint64_t>(WidthInBytes) * Height;
    if (r == CUDA_SUCCESS && dptr && pPitch)
      record_alloc(*s,
                   {.addr = *dptr, .size = static_cast<uint64_t>(*pPitch) * Height, .requested = requested,
                    .kind = MemKind::Device},
                   __builtin_return_address(0));
    else if (r == CUDA_ERROR_OUT_OF_MEMORY)
      record_oom(*s, requested, 0, __builtin_return_address(0));
  }
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                            unsigned int flags) {
  auto real = real_fn<Hook::cuMemAllocManaged, decltype(&::cuMemAllocManaged)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(dptr, bytesize, flags);
  if (Session* s = scope.session()) {
    if (r == CUDA_SUCCESS && dptr)
      record_alloc(*s, {.addr = *dptr, .size = bytesize, .requested = bytesize, .kind = MemKind::Managed},
                   __builtin_return_address(0));
    else if (r == CUDA_ERROR_OUT_OF_MEMORY)
      record_oom(*s, bytesize, 0, __builtin_return_address(0));
  }
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  auto real = real_fn<Hook::cuMemFree_v2, decltype(&::cuMemFree_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), dptr, 0, __builtin_return_address(0));
  CUresult r = real(dptr);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}
